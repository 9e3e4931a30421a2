"""Which compressor each content kind gets, and its token budget (in verifier tokens).

Kinds: `user` and `assistant` (message text), `tool_result`, `passage` (retrieved text in a user message),
`tools` (the schemas block), `image`. The system prompt is never compressed.

A text item at or under its kind's budget stays verbatim; a longer one is compressed to at most the budget.
Budget `None` means "never compress this kind". Tools are always shown as signatures in the compressed view
(`tools` budget, when set, drops their descriptions if the signatures alone would exceed it); images as captions.

The default policy is append-stable: every item's compressed form depends only on the item and what came before
it. Two settings trade that away on purpose, for a shorter or more exact compressed view:
- `keep_last_turns=N`: the last N turns (a turn starts at each user message) stay verbatim and older ones are
  compressed, so a turn's compressed form changes once, when it ages out of the window;
- `total_budget=T`: while the full view has at most T tokens, the compressed view equals the full view; the step
  that crosses T switches to compression.

The drafter reads every item whole by default. `drafter_budget=B` gives it a retrieval view instead (as RAPID's
drafter reads retrieved text): each passage and tool result longer than B tokens reaches the drafter as its BM25
selection for the query, at most B tokens, under the same arrival rule as the verifier's query-aware compressors.
A small drafter then reads a few hundred relevant tokens rather than thousands, where it finds what it is asked for
far more often (docs/benchmarks.md, NIAH) and at a fraction of the cost; what needs the whole document (what does
it conclude?) it reads only as well as BM25 selects for the question.

Past the models' window (`DualContext.render(window=...)`, which AsymSpecChat passes) a view keeps its first turns
(system prompt, tools, the first request) and its latest turns, dropping whole turns oldest first a quarter window at a time, so
the cut moves rarely and what follows it stays cached between moves; `on_overflow="error"` raises instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from ..errors import ConfigError
from .compressors import COMPRESSORS, Compressor, EmbeddingSelect, SurprisalPrune

TEXT_KINDS = ("user", "assistant", "tool_result", "passage")
KINDS = TEXT_KINDS + ("tools", "image")
MIN_BUDGET = 16  # below this a marker or gap alone would not fit

OVERFLOW = ("truncate", "error")
DEFAULT_BUDGETS: dict[str, int | None] = {"user": None, "assistant": None, "tool_result": 256, "passage": 128, "tools": None}
DEFAULT_COMPRESSORS: dict[str, str] = {"user": "head_tail", "assistant": "head_tail", "tool_result": "bm25", "passage": "bm25"}
RETRIEVED_KINDS = ("tool_result", "passage")  # what the drafter's retrieval view selects from (`drafter_budget`)


@dataclass(frozen=True)
class CompressionPolicy:
    """Budgets and compressors per kind; a partial mapping overrides only the kinds it names.

    `compressors` values: "head_tail", "bm25", "embedding" (needs the `embeddings` extra), "surprisal" (needs a
    drafter in DualContext), or a `Compressor` instance.
    """

    budgets: Mapping[str, int | None] = field(default_factory=dict)
    compressors: Mapping[str, str | Compressor] = field(default_factory=dict)
    keep_last_turns: int | None = None
    old_turn_budget: int = 128  # assistant text in turns older than the window, when its own budget is None
    total_budget: int | None = None
    # past the models' window: "truncate" drops the oldest turns of a view (AsymSpecChat; render's `window`),
    # "error" raises ContextTooLongError instead
    on_overflow: str = "truncate"
    # the drafter's retrieval view: passages and tool results over this many tokens reach it BM25-selected
    drafter_budget: int | None = None

    def __post_init__(self):
        for mapping, allowed, what in ((self.budgets, KINDS, "budgets"), (self.compressors, TEXT_KINDS, "compressors")):
            unknown = set(mapping) - set(allowed)
            if unknown:
                raise ConfigError(f"CompressionPolicy.{what} has unknown kinds {sorted(unknown)}; use {', '.join(allowed)}.")
        object.__setattr__(self, "budgets", {**DEFAULT_BUDGETS, **self.budgets})
        object.__setattr__(self, "compressors", {**DEFAULT_COMPRESSORS, **self.compressors})
        for kind, budget in self.budgets.items():
            _check_budget(f"budgets[{kind!r}]", budget)
        _check_budget("old_turn_budget", self.old_turn_budget)
        _check_budget("drafter_budget", self.drafter_budget)
        if self.total_budget is not None and (not isinstance(self.total_budget, int) or self.total_budget < 1):
            raise ConfigError(f"total_budget must be a positive int or None, got {self.total_budget!r}.")
        if self.on_overflow not in OVERFLOW:
            raise ConfigError(f"on_overflow must be one of {', '.join(OVERFLOW)}, got {self.on_overflow!r}.")
        if self.keep_last_turns is not None and (not isinstance(self.keep_last_turns, int) or self.keep_last_turns < 0):
            raise ConfigError(f"keep_last_turns must be a non-negative int or None, got {self.keep_last_turns!r}.")
        for kind, spec in self.compressors.items():
            if not isinstance(spec, Compressor) and spec not in COMPRESSORS:
                raise ConfigError(f"compressors[{kind!r}] = {spec!r} is unknown; use one of {', '.join(COMPRESSORS)} or a Compressor instance.")

    def budget(self, kind: str, old_turn: bool = False) -> int | None:
        budget = self.budgets.get(kind)
        if budget is None and old_turn and kind == "assistant":
            return self.old_turn_budget
        return budget

    def build_compressors(self, *, surprisal_scorer: Callable | None = None, embedder: Callable | None = None) -> dict[str, Compressor]:
        """One compressor instance per text kind; raises ConfigError when a named compressor lacks what it needs."""
        built: dict[str, Compressor] = {}
        shared: dict[str, Compressor] = {}  # kinds naming the same compressor share one instance (and its model)
        for kind, spec in self.compressors.items():
            if isinstance(spec, Compressor):
                built[kind] = spec
                continue
            if spec not in shared:
                if spec == "surprisal":
                    if surprisal_scorer is None:
                        raise ConfigError(
                            f"The policy compresses {kind!r} with 'surprisal', which needs the drafter: pass "
                            "DualContext(tokenizer, policy, drafter=<causal LM sharing the tokenizer>)."
                        )
                    shared[spec] = SurprisalPrune(surprisal_scorer)
                elif spec == "embedding":
                    shared[spec] = EmbeddingSelect(embedder)
                else:
                    shared[spec] = COMPRESSORS[spec]()
            built[kind] = shared[spec]
        return built


def _check_budget(name: str, budget) -> None:
    if budget is None:
        return
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < MIN_BUDGET:
        raise ConfigError(f"{name} must be an int >= {MIN_BUDGET} (verifier tokens) or None, got {budget!r}.")
