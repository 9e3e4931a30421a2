import pytest

from asymspec_agents.testing import tiny_random_pair


@pytest.fixture(scope="module")
def pair():
    """A tiny random verifier and a different, smaller drafter over the byte tokenizer."""
    return tiny_random_pair(seed=0)


@pytest.fixture(scope="module")
def same_pair():
    """The drafter is the verifier: every proposal is accepted."""
    return tiny_random_pair(seed=0, same=True)
