"""Shared pieces of the benchmarks: real text, medians, where results go."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path

from ..plotting import pyplot

# where a benchmark writes unless --out says: a folder of the current directory (the repository's shipped results
# are in benchmarks/results, written with --out benchmarks/results/NAME)
RESULTS = Path("asymspec-results")


def pydoc_text() -> str:
    """Python's own reference documentation (`pydoc_data.topics`): real text no one here wrote."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


def median(values) -> float:
    return float(statistics.median(values)) if values else float("nan")


def percentile(values, q: float) -> float:
    """The value at quantile q of `values` (nearest rank; NaN when there are none)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def write_json(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_report(markdown_path: Path | str, markdown: str, plot: Callable[[], object] | None = None) -> None:
    """A benchmark's report: its markdown, and its plots (`plot()`) where matplotlib is installed
    (`pip install 'asymspec-agents[bench]'`)."""
    Path(markdown_path).parent.mkdir(parents=True, exist_ok=True)
    Path(markdown_path).write_text(markdown)
    if plot is not None and pyplot(optional=True) is not None:
        plot()


def markdown_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def terminal_table(header: list[str], rows: list[list], left: int = 1) -> str:
    """A plain-text table for the terminal: the first `left` columns aligned left, the others (numbers) right."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    return "\n".join(" ".join(str(cell).ljust(width) if i < left else str(cell).rjust(width)
                              for i, (cell, width) in enumerate(zip(row, widths))).rstrip()
                     for row in [header, *rows])


def wilson(right: int, n: int, z: float = 1.96) -> list[float] | None:
    """The 95% Wilson score interval of right/n (sound at 0 and 1, where the normal approximation is not)."""
    if not n:
        return None
    p = right / n
    shrink = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / shrink
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / shrink
    return [max(0.0, centre - spread), min(1.0, centre + spread)]
