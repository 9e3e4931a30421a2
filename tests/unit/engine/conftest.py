import pytest

from asymspec_agents import AsymSpecEngine

PROMPT = "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. " * 3


@pytest.fixture
def engine(pair):
    return AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)


@pytest.fixture
def same_engine(same_pair):
    return AsymSpecEngine(same_pair.verifier, same_pair.drafter, same_pair.tokenizer)


@pytest.fixture(scope="module")
def views(pair):
    full = pair.tokenizer(PROMPT)["input_ids"]
    return full, full[-30:]
