"""Decision points: positions where the agent commits to a choice and the verifier must sample at slot 0.

A position is tagged when the decoded text before it ends with a trigger (a regex anchored at the end), or
when the distribution at it is more uncertain than an entropy threshold. The engine ends a draft block just
before a tagged position, so the verifier produces that token at the first slot of its next pass (DESIGN §4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Each trigger matches the text *before* the decision token.
TOOL_NAME = r'<tool_call>\s*\{\s*"name"\s*:\s*"$'
FINAL_ANSWER = r"Final Answer:\s*$"
OPTION_LETTER = r"\b(?:[Aa]nswer|[Oo]ption|[Cc]hoice)(?: is)?:?\s*\(?$"
DEFAULT_TRIGGERS = (TOOL_NAME, FINAL_ANSWER, OPTION_LETTER)


@dataclass(frozen=True)
class DecisionPolicy:
    triggers: tuple[str, ...] = DEFAULT_TRIGGERS
    entropy_threshold: float | None = None  # nats; None disables the entropy trigger
    lookback_tokens: int = 24  # how many trailing tokens are decoded to test the triggers
    _pattern: re.Pattern | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        pattern = re.compile("|".join(f"(?:{t})" for t in self.triggers)) if self.triggers else None
        object.__setattr__(self, "_pattern", pattern)

    @classmethod
    def none(cls) -> "DecisionPolicy":
        return cls(triggers=(), entropy_threshold=None)

    def text_triggers(self, tail: str) -> bool:
        return self._pattern is not None and self._pattern.search(tail) is not None

    def entropy_triggers(self, entropy: float) -> bool:
        return self.entropy_threshold is not None and entropy > self.entropy_threshold
