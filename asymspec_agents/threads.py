"""How many CPU threads torch uses: the caller's choice, else `OMP_NUM_THREADS`, else the cores other work leaves.

Measured on a 2-core machine (README, Troubleshooting): idle, 1 and 2 threads decode alike and 2 prefill a
1k-token prompt 1.7× faster; with one core busy with another job, 2 threads run 1.8–2.9× slower than 1 (the
threads of one forward wait for each other on a core they do not get). So by default torch gets only the cores
the 1-minute load average leaves free, chosen once, when the first model loads.
"""

from __future__ import annotations

import os

import torch

from .errors import ConfigError

_TORCH_DEFAULT = torch.get_num_threads()  # read at import: a later, different count is the caller's own choice
_chosen = False


def free_cores() -> int:
    """Cores this process may use, less the 1-minute load average of the machine (at least 1)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        load = 0.0
    return max(1, min(cores, round(cores - load)))


def configure_threads(threads: int | None = None) -> int:
    """Set torch's thread count for this process and return it. `threads`: that many; None: keep a choice made
    before (this function's, `OMP_NUM_THREADS`, or the caller's own `torch.set_num_threads`), else choose
    `min(torch's default, free_cores())` once."""
    global _chosen
    if threads is not None:
        if not isinstance(threads, int) or threads < 1:
            raise ConfigError(f"threads must be a positive integer, got {threads!r}.")
        torch.set_num_threads(threads)
        _chosen = True
    elif not _chosen and "OMP_NUM_THREADS" not in os.environ and torch.get_num_threads() == _TORCH_DEFAULT:
        torch.set_num_threads(min(_TORCH_DEFAULT, free_cores()))
        _chosen = True
    return torch.get_num_threads()
