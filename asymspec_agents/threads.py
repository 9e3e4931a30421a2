"""How many CPU threads torch uses: the caller's choice, else `OMP_NUM_THREADS`, else the cores other work leaves.

Measured on a 2-core machine (README, Troubleshooting): idle, 1 and 2 threads decode alike and 2 prefill a
1k-token prompt 1.7× faster; with one core busy with another job, 2 threads run 1.8–2.9× slower than 1 (the
threads of one forward wait for each other on a core they do not get). So by default torch gets only the cores
the 1-minute load average leaves free, chosen once, when the first model loads.
"""

from __future__ import annotations

import contextlib
import ctypes
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


# -- one OpenMP thread pool per process -------------------------------------------------------------------------
# torch's CPU kernels run on OpenMP (libgomp in Linux wheels), which keeps a pool of worker threads per thread that
# ran a parallel kernel. Once two threads own pools, libgomp holds more threads than there are cores and stops
# spinning while it waits: on 2 cores a one-token forward then takes 59 ms instead of 35 (a 4M-element `exp` in the
# main thread is enough to slow every forward of another thread from then on). So the engine runs every local
# forward on one thread (batching.py), which lets its pool go whenever it has nothing to run (training in the main
# thread after a call keeps its speed), and a thread that decodes beside it does its own, small, torch work on one
# core with no pool of its own (`single_core`).


def _libgomp():
    """The libgomp this process loaded (torch's), or None (other platforms and OpenMP runtimes)."""
    try:
        with open("/proc/self/maps") as maps:
            path = next((line.split()[-1] for line in maps if "libgomp" in line and line.split()[-1].startswith("/")),
                        None)
    except OSError:
        return None
    if path is None:
        return None
    try:
        library = ctypes.CDLL(path)
        library.omp_pause_resource_all, library.omp_set_num_threads, library.omp_get_max_threads  # noqa: B018
    except (OSError, AttributeError):
        return None
    return library


_gomp = _libgomp()


def release_pool() -> None:
    """Let this thread's OpenMP pool go (the next parallel kernel makes one again, in ~0.1 ms)."""
    if _gomp is not None:
        _gomp.omp_pause_resource_all(1)  # omp_pause_soft


@contextlib.contextmanager
def single_core():
    """This thread's torch work on one core, with no OpenMP pool of its own, until the block ends (then as it was).
    Leaves the cores to the forward thread; a pool this thread made before (loading models, say) is let go."""
    if _gomp is None:
        yield
        return
    torch.get_num_threads()  # torch sets each thread's OpenMP count on first use: let it, before changing it
    before = _gomp.omp_get_max_threads()
    release_pool()
    _gomp.omp_set_num_threads(1)
    try:
        yield
    finally:
        _gomp.omp_set_num_threads(before)
