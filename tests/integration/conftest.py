import pytest

from asymspec_agents.models import load_model


@pytest.fixture(scope="session")
def bundled():
    """(model, tokenizer) of the bundled SmolLM2-135M-Instruct, loaded once per test session."""
    return load_model("bundled")
