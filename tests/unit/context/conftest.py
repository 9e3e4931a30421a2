import pytest

from asymspec_agents.testing import byte_tokenizer


@pytest.fixture(scope="session")
def tok():
    """The byte-level tokenizer: one token per byte, so token budgets are byte budgets."""
    return byte_tokenizer()
