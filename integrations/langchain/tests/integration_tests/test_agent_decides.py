"""A LangGraph `create_agent` on the tuned pair calls the user's own tool under the default tool choice and answers
from its result: the snippet of docs/agents.md, "Use it"."""

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

from langchain_asymspec import ChatAsymSpec

pytestmark = pytest.mark.integration


@tool
def lookup_population(country: str) -> str:
    """Look up the population of a country."""
    return {"Kenya": "55.1 million", "Chile": "19.6 million"}.get(country, "unknown")


def test_create_agent_on_bundled_agent_calls_the_tool_and_answers_from_it():
    llm = ChatAsymSpec(verifier="bundled-agent", drafter="bundled-small", fuse_bonus=True, max_tokens=48)
    agent = create_agent(llm, [lookup_population])
    result = agent.invoke({"messages": [("user", "What is the population of Kenya?")]}, {"recursion_limit": 6})
    messages = result["messages"]
    calls = [call for m in messages if isinstance(m, AIMessage) for call in m.tool_calls]
    assert [(c["name"], c["args"]) for c in calls] == [("lookup_population", {"country": "Kenya"})]
    assert any(isinstance(m, ToolMessage) and m.content == "55.1 million" for m in messages)
    final = messages[-1]
    assert isinstance(final, AIMessage) and not final.tool_calls and "55.1 million" in final.content
