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
from . import fusion

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


class DecisionSchedule:
    """One call's decision points, as the decoding loop asks about them: is the next position one (the text before
    it, the grammar there, or the uncertainty of a row), and where does a verified block cut for one. Without a
    policy nothing is ever tagged."""

    def __init__(self, policy: DecisionPolicy | None, tokenizer, prompt: list[int]):
        self.policy, self.tokenizer = policy, tokenizer
        self._lookback = policy.lookback_tokens if policy else 0
        self._tail = list(prompt[-self._lookback:]) if self._lookback else []  # the last tokens read
        self._forced = False  # the verifier's entropy tagged the next position

    def before(self, drafts: list[int], allowed: torch.Tensor | None) -> bool:
        """Is the position after the committed text and `drafts` a decision point (text triggers, or the grammar
        branching there)?"""
        if not self.policy:
            return False
        if self.policy.grammar_branches(allowed, self.tokenizer):
            return True
        if not self.policy.triggers:
            return False
        ids = (self._tail + drafts)[-self._lookback:]
        return self.policy.text_triggers(self.tokenizer.decode(ids))

    def uncertain(self, row: torch.Tensor) -> bool:
        """Is the distribution of `row` (logits) more uncertain than the entropy threshold?"""
        return bool(self.policy and self.policy.entropy_triggers(float(fusion.entropy(row))))

    def at_block_start(self, allowed: torch.Tensor | None, row: torch.Tensor) -> bool:
        """Is the next block's first position a decision point (tagged by the last block, or now)? Asked once."""
        forced, self._forced = self._forced, False
        return forced or self.before([], allowed) or self.uncertain(row)

    def tag_next(self) -> None:
        """The verifier's uncertainty tagged the position after the committed text: the next block starts there."""
        self._forced = True

    def cut(self, fused: torch.Tensor, accepted: int) -> int | None:
        """The first slot ≥ 1 among the `accepted` positions whose verified row (`fused`, `[k, vocab]`) is more
        uncertain than the threshold: the block keeps the drafts before it and the next block starts there."""
        if not self.policy or self.policy.entropy_threshold is None or accepted == 0:
            return None
        hot = (fusion.entropy(fused[1: accepted + 1]) > self.policy.entropy_threshold).nonzero()
        return 1 + int(hot[0]) if len(hot) else None

    def extend(self, tokens: list[int]) -> None:
        """Committed tokens: the text the triggers read next."""
        if self._lookback:
            self._tail = (self._tail + tokens)[-self._lookback:]

