"""Fixtures of the integration tests: the bundled SmolLM2-135M pair and the examples' real tools."""

import importlib.util
import sys
from pathlib import Path

import pytest

from langchain_asymspec import ChatAsymSpec

ROOT = Path(__file__).resolve().parents[4]
EXAMPLES = ROOT / "examples"


def load_example(name: str):
    """An example script as a module (the tests reuse its tools and agent builder)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def agent_example():
    return load_example("langgraph_agent")


@pytest.fixture(scope="session")
def docs_tools(agent_example):
    """[search_python_docs, calculator]: BM25 over Python's language reference, and arithmetic."""
    return agent_example.make_tools(agent_example.ReferenceSearch(agent_example.python_reference()))


@pytest.fixture
def llm():
    return ChatAsymSpec(verifier="bundled", drafter="bundled", max_tokens=48)
