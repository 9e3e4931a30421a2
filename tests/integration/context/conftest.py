import pytest

from asymspec_agents.models import load_model


@pytest.fixture(scope="session")
def smol():
    """SmolLM2-135M-Instruct (model, tokenizer): its ChatML template has no tool support and adds a default system prompt."""
    return load_model("bundled")
