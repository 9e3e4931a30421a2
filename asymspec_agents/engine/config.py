"""Generation settings, validated once at the boundary; the one table of their defaults (docs/design.md §4).

Some defaults depend on the mode and the acceptance rule: AsymSpec runs the `ratio` rule with its authors' settings
(γ = 0.5, K = 2: `configs/paper.yaml` of USTC-StarTeam/AsymSpec) and two changes the project measures to matter: the
bonus token fused (unfused, an identical pair closes none of the needle gap) and the drafter's copy head
(copying.py; the default drafter then finds names and phrases in long documents: docs/benchmarks.md);
`preset="paper"` gives the rule as published. The symmetric modes keep exact verification. The defaults
are the same for every pair: no model's name changes them. Such fields hold `None` until `resolved()` fills them from
the tables below, so that `replace(config, mode=...)` still gets the new mode's defaults.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, replace
from typing import NamedTuple, get_type_hints

from ..errors import ConfigError
from .decisions import DecisionPolicy
from .fusion import GREEDY_BELOW


class Mode(NamedTuple):
    """Which view each stream of a mode reads (docs/design.md §3)."""

    draft: str | None  # the drafter's view; None: the verifier decodes alone
    verify: str  # the verifier's view
    contrast: bool  # the drafter also reads the verifier's view: δ-fusion and the gate

    @property
    def drafter_views(self) -> set[str]:
        return {view for view in (self.draft, "comp" if self.contrast else None) if view}

    @property
    def streams(self) -> set[tuple[str, str]]:
        """(role, view) of every stream the mode reads."""
        return {("verifier", self.verify)} | {("drafter", view) for view in self.drafter_views}


MODES: dict[str, Mode] = {
    "full": Mode(None, "full", False),
    "compressed": Mode(None, "comp", False),
    "symmetric": Mode("comp", "comp", False),
    "symmetric_full": Mode("full", "full", False),
    "asymmetric": Mode("full", "comp", True),
}
ACCEPTANCE_RULES = ("ratio", "fused")
# CDA divergences (their names in the authors' sampler: jsd, cma, jsd_pos, cma_vnorm, cma_hbase)
DIVERGENCES = ("jsd", "kl", "jsd_pos", "kl_vnorm", "kl_hbase")
# δ sources (theirs: ours, raw_aug, scd): a − b, a alone, t − b (speculative contrastive decoding)
DELTA_SOURCES = ("contrast", "full_only", "scd")
# Defaults of the mode-dependent fields: AsymSpec's per preset and acceptance rule; every other mode decodes exactly.
PAPER = dict(beta=1.0, gamma=0.5, k_max=2, adaptive_k=False, cda=True, fuse_bonus=False, copy_weight=0.0)
MEASURED = {**PAPER, "fuse_bonus": True, "copy_weight": 0.9}
OURS = dict(beta=1.0, gamma=1.0, k_max=8, adaptive_k=True, cda=True, fuse_bonus=True, copy_weight=0.9)
EXACT = dict(beta=0.0, gamma=1.0, k_max=8, adaptive_k=True, cda=False, fuse_bonus=False, copy_weight=0.0)  # no δ
PRESETS = {"measured": {"ratio": MEASURED, "fused": OURS}, "paper": {"ratio": PAPER, "fused": OURS}}
CHOICES = {"mode": tuple(MODES), "acceptance": ACCEPTANCE_RULES, "divergence": DIVERGENCES,
           "delta_source": DELTA_SOURCES, "preset": tuple(PRESETS)}
DEFAULT_ACCEPTANCE = {"asymmetric": "ratio"}  # every other mode: "fused" (with γ = 1: exact verification)
MODE_DEPENDENT = ("acceptance",) + tuple(PAPER)


def _setting(default, help: str, factory=None):
    """A GenerationConfig field with its one-line help: the CLI flags and the integrations' fields read both."""
    if factory is not None:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


SEEDS = (-2**63, 2**64 - 1)  # what torch.Generator.manual_seed takes


@dataclass
class GenerationConfig:
    """How one call decodes. `temperature=0` (or below `GREEDY_BELOW`) is greedy; sampling applies top-k/top-p to
    draft and target alike.

    A field left `None` takes its mode's default (`resolved()`; the table is in docs/design.md §4).
    `acceptance="ratio"` accepts a draft d iff p_V(d | comp) > γ_eff·p_S(d | comp) and fuses only the token it
    emits (the published rule); `"fused"` accepts d iff p'(d) ≥ γ_eff·max p' on p' = softmax(t + β·δ).
    """

    mode: str = _setting("asymmetric", "full, compressed, symmetric, symmetric_full or asymmetric (AsymSpec)")
    max_new_tokens: int = _setting(256, "most tokens one reply may have")
    acceptance: str | None = _setting(None, "acceptance rule: ratio (the published one) or fused (ours)")
    preset: str = _setting("measured", "AsymSpec's defaults: measured (the ratio rule, bonus fused, copy head) or "
                           "paper (as published: bonus unfused, no copy head)")
    beta: float | None = _setting(None, "weight of δ added to the verifier's log-probabilities where it fuses")
    gamma: float | None = _setting(None, "acceptance threshold in (0, 1]")
    cda: bool | None = _setting(None, "relax acceptance where the drafter's two views diverge (the CDA gate)")
    divergence: str = _setting("jsd", "the gate's divergence: jsd, kl, jsd_pos, kl_vnorm or kl_hbase")
    cda_lambda: float = _setting(1.0, "λ of the gate: γ_eff = γ·exp(−λ·divergence) (jsd and kl)")
    delta_source: str = _setting("contrast", "δ: contrast (a − b), full_only (a) or scd (t − b)")
    fuse_bonus: bool | None = _setting(None, "take the bonus token after a fully accepted block from t + β·δ")
    temperature: float = _setting(0.0, "0 (or below 1e-5) is greedy")
    top_p: float = _setting(1.0, "nucleus sampling mass (1 keeps all)")
    top_k: int = _setting(0, "sample among the k most likely tokens (0 keeps all)")
    k_max: int | None = _setting(None, "longest draft block")
    adaptive_k: bool | None = _setting(None, "grow or shrink the draft block from recent acceptance")
    draft_confidence: float = _setting(0.0, "stop drafting after a token the drafter gives less than this")
    copy_weight: float | None = _setting(None, "λ of the drafter's copy head: its rows mixed with what its view's "
                                         "prompt continues where the reply repeats it (prompt lookup); 0: off")
    seed: int | None = _setting(0, "sampling seed (None: a fresh one per call)")
    stop: list[str] = _setting(None, "stop strings, never part of the output", factory=list)
    decisions: DecisionPolicy | None = _setting(
        None, "where the verifier decides itself at slot 0 (None: no scheduling)", factory=DecisionPolicy)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = [s for s in (self.stop or []) if s]
        self.resolved().validate()

    def resolved(self) -> "GenerationConfig":
        """This config with every mode-dependent `None` replaced by its mode's default."""
        missing = [name for name in MODE_DEPENDENT if getattr(self, name) is None]
        if not missing:
            return self
        acceptance = self.acceptance or DEFAULT_ACCEPTANCE.get(self.mode, "fused")
        # an unknown rule falls back to EXACT here; validate() then names it
        table = PRESETS.get(self.preset, PRESETS["measured"]).get(acceptance, EXACT) if self.mode == "asymmetric" else EXACT
        defaults = {"acceptance": acceptance, **table}
        return replace(self, **{name: defaults[name] for name in missing})

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"Unknown mode {self.mode!r}; choose one of {', '.join(MODES)}.")
        _choice("acceptance", self.acceptance, ACCEPTANCE_RULES)
        _choice("divergence", self.divergence, DIVERGENCES)
        _choice("delta_source", self.delta_source, DELTA_SOURCES)
        _choice("preset", self.preset, tuple(PRESETS))
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens <= 0:
            raise ConfigError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}.")
        if self.beta < 0:
            raise ConfigError(f"beta must be >= 0 (0 turns δ-fusion off), got {self.beta}.")
        if not 0 < self.gamma <= 1:
            raise ConfigError(f"gamma must lie in (0, 1] (1 with acceptance='fused' is exact verification), got {self.gamma}.")
        if self.cda_lambda < 0:
            raise ConfigError(f"cda_lambda must be >= 0 (0 turns the gate's effect off), got {self.cda_lambda}.")
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
        if self.seed is not None and not (isinstance(self.seed, int) and SEEDS[0] <= self.seed <= SEEDS[1]):
            raise ConfigError(f"seed must be an integer in [{SEEDS[0]}, {SEEDS[1]}] (or None), got {self.seed!r}.")
        if not 0 <= self.copy_weight < 1:
            raise ConfigError(f"copy_weight must lie in [0, 1) (0 turns the copy head off), got {self.copy_weight}.")


def _choice(name: str, value, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"Unknown {name} {value!r}; choose one of {', '.join(allowed)}.")


def setting_fields(*, exclude: tuple[str, ...] = (), rename: dict[str, str] | None = None) -> dict[str, tuple]:
    """GenerationConfig's fields as `{name: (type, default, default_factory, help)}`, for integrations that declare
    them as their own settings (`rename`: GenerationConfig name -> theirs) and for the command line."""
    hints = get_type_hints(GenerationConfig)
    rename = rename or {}
    out = {}
    for f in fields(GenerationConfig):
        if f.name in exclude:
            continue
        factory = None if f.default_factory is MISSING else f.default_factory
        out[rename.get(f.name, f.name)] = (hints[f.name], None if factory else f.default, factory, f.metadata["help"])
    return out
