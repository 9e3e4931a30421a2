"""The compression report: per item, what kind it was, which compressor ran, and its size before and after."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class ReportItem:
    message_index: int | None  # None for the tools block
    kind: str
    compressor: str  # "none" when the item was kept verbatim
    budget: int | None
    tokens_before: int  # verifier tokens
    tokens_after: int
    cl100k_before: int | None  # None when cl100k_base is not available
    cl100k_after: int | None
    cached: bool  # the compression came from the cache (no compressor ran this step)


@dataclass
class CompressionReport:
    items: list[ReportItem] = field(default_factory=list)
    full_tokens: int = 0  # whole views, verifier tokens
    comp_tokens: int = 0
    full_cl100k: int | None = None  # sums over the views' segments
    comp_cl100k: int | None = None
    cl100k_note: str | None = None  # why cl100k counts are None, when they are
    fits_total_budget: bool = False  # the policy's total_budget held, so the compressed view is the full view

    @property
    def ratio(self) -> float:
        """Compressed / full size of the whole views, in verifier tokens."""
        return self.comp_tokens / self.full_tokens if self.full_tokens else 1.0

    def by_kind(self) -> dict[str, dict]:
        """Totals per kind: item count, compressed count, tokens and cl100k before/after."""
        out: dict[str, dict] = {}
        for item in self.items:
            row = out.setdefault(item.kind, {"items": 0, "compressed": 0, "tokens_before": 0, "tokens_after": 0,
                                             "cl100k_before": 0, "cl100k_after": 0})
            row["items"] += 1
            row["compressed"] += item.compressor != "none"
            row["tokens_before"] += item.tokens_before
            row["tokens_after"] += item.tokens_after
            for key in ("cl100k_before", "cl100k_after"):
                value = getattr(item, key)
                row[key] = None if value is None or row[key] is None else row[key] + value
        return out

    def to_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "by_kind": self.by_kind()}
