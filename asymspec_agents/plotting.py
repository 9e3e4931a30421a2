"""matplotlib for the reports the benchmarks and the training runs write (PNG files only)."""

from __future__ import annotations


def pyplot(optional: bool = False):
    """matplotlib's pyplot on the file-only Agg backend; with `optional`, None when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        if optional:
            return None
        raise
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
