"""Generation settings, validated once at the boundary."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError
from .decisions import DecisionPolicy

# mode -> (drafter view, verifier view, δ-fusion and gate); DESIGN §3.
MODES: dict[str, tuple[str | None, str, bool]] = {
    "full": (None, "full", False),
    "compressed": (None, "comp", False),
    "symmetric": ("comp", "comp", False),
    "symmetric_full": ("full", "full", False),
    "asymmetric": ("full", "comp", True),
}


@dataclass
class GenerationConfig:
    """How one call decodes. `temperature=0` is greedy; sampling applies top-k/top-p to draft and target alike.

    beta: weight of δ = log_softmax(drafter on full) − log_softmax(drafter on compressed) added to the verifier.
    gamma, cda: acceptance threshold and the divergence gate that relaxes it (γ_eff = γ·exp(−JSD)).
    k_max: longest draft block; `adaptive_k` grows/shrinks the block from recent acceptance;
    draft_confidence: stop drafting after a token whose drafter probability falls below it.
    decisions: which positions the verifier must produce itself at slot 0 (None: no scheduling).
    """

    mode: str = "asymmetric"
    max_new_tokens: int = 256
    beta: float = 1.0
    gamma: float = 1.0
    cda: bool = True
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    k_max: int = 8
    adaptive_k: bool = True
    draft_confidence: float = 0.0
    seed: int | None = 0
    stop: list[str] = field(default_factory=list)
    decisions: DecisionPolicy | None = field(default_factory=DecisionPolicy)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = [s for s in (self.stop or []) if s]
        self.validate()

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def speculative(self) -> bool:
        return MODES[self.mode][0] is not None

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"Unknown mode {self.mode!r}; choose one of {', '.join(MODES)}.")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens <= 0:
            raise ConfigError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}.")
        if self.beta < 0:
            raise ConfigError(f"beta must be >= 0 (0 turns δ-fusion off), got {self.beta}.")
        if not 0 < self.gamma <= 1:
            raise ConfigError(f"gamma must lie in (0, 1] (1 is exact verification), got {self.gamma}.")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must lie in (0, 1], got {self.top_p}.")
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0 (0 disables it), got {self.top_k}.")
        if not isinstance(self.k_max, int) or self.k_max < 1:
            raise ConfigError(f"k_max must be an integer >= 1, got {self.k_max!r}.")
        if not 0 <= self.draft_confidence < 1:
            raise ConfigError(f"draft_confidence must lie in [0, 1), got {self.draft_confidence}.")
