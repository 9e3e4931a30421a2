"""LangChain's stock ChatOpenAI against a real `asymspec serve` process on 127.0.0.1 (bundled pair)."""

import pytest

pytest.importorskip("langchain_openai")
from langchain_core.messages import AIMessageChunk, HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

from asymspec_agents.server.process import ServerProcess  # noqa: E402

pytestmark = pytest.mark.integration


@tool
def get_weather(city: str) -> str:
    """Current weather of a city."""
    return f"Sunny in {city}."


@pytest.fixture(scope="module")
def llm():
    with ServerProcess(["--max-new-tokens", "48"]) as server:
        yield ChatOpenAI(base_url=server.base_url, api_key="unused", model="asymspec", temperature=0,
                         stream_usage=True, max_retries=0, timeout=120)
    assert server.returncode == 0, server.log()


def test_chat_openai_gets_tool_calls_and_usage(llm):
    message = llm.bind_tools([get_weather], tool_choice="any", parallel_tool_calls=False).invoke(
        [HumanMessage("What is the weather in Paris?")])
    assert [call["name"] for call in message.tool_calls] == ["get_weather"] and "Paris" in message.tool_calls[0]["args"]["city"]
    assert message.response_metadata["finish_reason"] == "tool_calls"
    assert message.usage_metadata["input_tokens"] > 0 and message.usage_metadata["output_tokens"] > 0


def test_chat_openai_streams_the_text_it_invokes(llm):
    question = [HumanMessage("Name three colours.")]
    whole = llm.invoke(question, max_tokens=20)
    chunks = list(llm.stream(question, max_tokens=20))
    assert all(isinstance(c, AIMessageChunk) for c in chunks) and len(chunks) > 2
    merged = sum(chunks[1:], chunks[0])
    assert merged.content == whole.content and merged.usage_metadata["output_tokens"] == whole.usage_metadata["output_tokens"]
