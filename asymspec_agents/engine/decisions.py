"""Decision points: positions where the agent commits to a choice and the verifier must sample at slot 0.

A position is tagged when the decoded text before it ends with a trigger (a regex anchored at the end), when
a grammar constraint branches there (it allows a few different next characters: which tool, which enum value,
true or false, another argument or the end of the object), or when the distribution at it is more uncertain
than an entropy threshold. The engine ends a draft block just before a tagged position, so the verifier
produces that token at the first slot of its next pass (docs/design.md §6).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from ..token_bytes import token_bytes

# Each trigger matches the text *before* the decision token.
TOOL_NAME = r'<tool_call>\s*\{\s*"name"\s*:\s*"$'
FINAL_ANSWER = r"Final Answer:\s*$"
OPTION_LETTER = r"\b(?:[Aa]nswer|[Oo]ption|[Cc]hoice)(?: is)?:?\s*\(?$"
DEFAULT_TRIGGERS = (TOOL_NAME, FINAL_ANSWER, OPTION_LETTER)


@dataclass(frozen=True)
class DecisionPolicy:
    triggers: tuple[str, ...] = DEFAULT_TRIGGERS
    entropy_threshold: float | None = None  # nats; None disables the entropy trigger
    # A grammar branch point: the constraint allows 2..grammar_choices distinct next characters (whitespace
    # aside). Free text allows nearly all characters, a forced piece of JSON one: neither is a choice.
    grammar_choices: int | None = 8
    lookback_tokens: int = 24  # how many trailing tokens are decoded to test the triggers
    _pattern: re.Pattern | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        pattern = re.compile("|".join(f"(?:{t})" for t in self.triggers)) if self.triggers else None
        object.__setattr__(self, "_pattern", pattern)

    @classmethod
    def none(cls) -> "DecisionPolicy":
        return cls(triggers=(), entropy_threshold=None, grammar_choices=None)

    def text_triggers(self, tail: str) -> bool:
        return self._pattern is not None and self._pattern.search(tail) is not None

    def entropy_triggers(self, entropy: float) -> bool:
        return self.entropy_threshold is not None and entropy > self.entropy_threshold

    def grammar_branches(self, allowed: torch.Tensor | None, tokenizer) -> bool:
        """Whether the grammar's allowed tokens `[vocab]` start with 2..grammar_choices different characters."""
        if allowed is None or not self.grammar_choices:
            return False
        first = first_visible_bytes(tokenizer, allowed.numel())[allowed]
        if first.numel() < 2:
            return False
        choices = torch.unique(first[first >= 0]).numel()
        return 2 <= choices <= self.grammar_choices


@lru_cache(maxsize=8)
def first_visible_bytes(tokenizer, vocab_size: int) -> torch.Tensor:
    """Per token id, the first byte of its text that is not whitespace (-1: none, e.g. special tokens)."""
    table = [data.lstrip() for data in token_bytes(tokenizer, vocab_size)]
    return torch.tensor([data[0] if data else -1 for data in table], dtype=torch.int16)
