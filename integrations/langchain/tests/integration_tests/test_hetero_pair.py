"""ChatAsymSpec on the heterogeneous bundled pair: Gemma-3-270M base verifies, SmolLM2-135M drafts (bridged)."""

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from langchain_asymspec import ChatAsymSpec

pytestmark = pytest.mark.integration


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


@pytest.fixture(scope="module")
def llm():
    return ChatAsymSpec(verifier="bundled-hetero", max_tokens=24)


def test_a_plain_reply_stops_at_the_next_turn_and_carries_speculation_stats(llm):
    reply = llm.invoke([HumanMessage("Name one planet of the solar system.")])
    assert isinstance(reply, AIMessage) and "User:" not in reply.content
    stats = reply.response_metadata["asymspec"]
    assert stats["mode"] == "asymmetric" and stats["drafted"] > 0
    assert reply.usage_metadata["input_tokens"] == stats["compressed_input_tokens"]


def test_a_forced_tool_call_is_grammar_valid_across_the_bridge(llm):
    reply = llm.bind_tools([multiply], tool_choice="any").invoke([HumanMessage("What is 12 times 7?")], max_tokens=64)
    assert reply.tool_calls and reply.tool_calls[0]["name"] == "multiply"
    assert set(reply.tool_calls[0]["args"]) == {"a", "b"}
    assert all(isinstance(v, int) for v in reply.tool_calls[0]["args"].values())
    stats = reply.response_metadata["asymspec"]
    assert stats["decision_points_at_slot0"] == stats["decision_points"]
