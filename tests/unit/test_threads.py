"""torch's thread count: the caller's choice, OMP_NUM_THREADS, else the cores the machine's load leaves free."""

import os

import pytest
import torch

from asymspec_agents import ConfigError, threads


@pytest.fixture
def fresh(monkeypatch):
    """No choice made yet in this process, no OMP_NUM_THREADS; torch's thread count restored afterwards."""
    before = torch.get_num_threads()
    monkeypatch.setattr(threads, "_chosen", False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(threads._TORCH_DEFAULT)
    yield monkeypatch
    torch.set_num_threads(before)


def cores() -> int:
    return len(os.sched_getaffinity(0))


@pytest.mark.parametrize("load, expected", [(0.0, None), (1e6, 1)])
def test_the_default_leaves_the_busy_cores_alone(fresh, load, expected):
    fresh.setattr(os, "getloadavg", lambda: (load, load, load))
    chosen = threads.configure_threads()
    assert chosen == (expected or min(threads._TORCH_DEFAULT, cores()))
    torch.set_num_threads(threads._TORCH_DEFAULT + 1)
    assert threads.configure_threads() == threads._TORCH_DEFAULT + 1  # chosen once: later calls keep any choice


def test_an_explicit_count_or_omp_num_threads_wins(fresh):
    fresh.setattr(os, "getloadavg", lambda: (1e6, 1e6, 1e6))
    fresh.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(2)
    assert threads.configure_threads() == 2  # the environment's choice is kept, however loaded the machine
    assert threads.configure_threads(1) == 1


def test_a_bad_count_is_a_config_error(fresh):
    with pytest.raises(ConfigError, match="positive integer"):
        threads.configure_threads(0)
