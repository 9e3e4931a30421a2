"""LangChain's stock ChatOpenAI against a real `asymspec serve` process on 127.0.0.1 (bundled pair)."""

import re

import pytest

pytest.importorskip("langchain_openai")
from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

from asymspec_agents.server.process import ServerProcess  # noqa: E402

pytestmark = pytest.mark.integration


@tool
def get_weather(city: str) -> str:
    """Current weather of a city."""
    return f"Sunny in {city}."


@tool
def lookup_population(country: str) -> str:
    """Look up the population of a country."""
    return {"Kenya": "55.1 million", "Chile": "19.6 million"}.get(country, "unknown")


@pytest.fixture(scope="module")
def server():
    with ServerProcess(["--max-new-tokens", "48"]) as server:
        yield server
    assert server.returncode == 0, server.log()


@pytest.fixture(scope="module")
def llm(server):
    return ChatOpenAI(base_url=server.base_url, api_key="unused", model="asymspec", temperature=0,
                      stream_usage=True, max_retries=0, timeout=120)


def test_a_tool_agents_next_step_continues_its_cache_and_reads_only_the_new_tokens():
    """The agent's second model call resends the first call's prompt, the tool call as ChatOpenAI returns it and the
    tool result: the server's log line for it says its conversation's cache continued and that the verifier read
    only what is new (the tool-call turn and the result), nothing of the first prompt again. (The verifier tuned
    to decide, bundled-agent: the default one never calls a tool under the default tool choice.)"""
    with ServerProcess(["--verifier", "bundled-agent", "--max-new-tokens", "48"]) as server:
        llm = ChatOpenAI(base_url=server.base_url, api_key="unused", model="asymspec", temperature=0, max_retries=0,
                         timeout=120)
        messages = create_agent(llm, [lookup_population]).invoke(
            {"messages": [("user", "What is the population of Kenya?")]}, {"recursion_limit": 6})["messages"]
    first, second = [m for m in messages if isinstance(m, AIMessage)]
    assert [c["name"] for c in first.tool_calls] == ["lookup_population"] and "55.1 million" in second.content
    lines = request_lines(server.log())
    assert len(lines) == 2 and "cache continued" in lines[1], lines
    new_tokens = (second.usage_metadata["input_tokens"] - first.usage_metadata["input_tokens"]
                  - first.usage_metadata["output_tokens"])
    assert int(re.search(r"V_comp (\d+)", lines[1]).group(1)) == new_tokens, lines


def request_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "POST /v1/chat/completions 200" in line]


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


def test_a_langgraph_thread_checkpointed_in_sqlite_resumes_against_a_restarted_server(tmp_path):
    """Threads a and b ask the same first question; the server then stops and a new process (another port, cold
    caches) takes over. Thread b's next turn, resumed from its SQLite checkpoint, equals thread a's next turn on
    the first server."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = str(tmp_path / "threads.sqlite")
    first_turn = {"messages": [("user", "What is the weather in Oslo?")]}
    next_turn = {"messages": [("user", "And in Lima?")]}
    a, b = ({"configurable": {"thread_id": name}, "recursion_limit": 8} for name in "ab")

    def agent(server, saver):
        llm = ChatOpenAI(base_url=server.base_url, api_key="unused", model="asymspec", temperature=0, max_retries=0,
                         timeout=120)
        return create_agent(llm, [get_weather], checkpointer=saver)

    args = ["--verifier", "bundled-agent", "--max-new-tokens", "48", "--log-level", "warning"]
    with ServerProcess(args) as server, SqliteSaver.from_conn_string(path) as saver:
        graph = agent(server, saver)
        for thread in (a, b):
            graph.invoke(first_turn, thread)
        expected = graph.invoke(next_turn, a)["messages"]
    with ServerProcess(args) as restarted, SqliteSaver.from_conn_string(path) as saver:
        assert restarted.port != server.port
        resumed = agent(restarted, saver).invoke(next_turn, b)["messages"]
    assert any(m.tool_calls for m in expected if isinstance(m, AIMessage))  # a real agent turn: it called the tool

    def said(messages):  # call ids differ between threads; what was said and called may not
        return [(type(m).__name__, m.text, [(c["name"], c["args"]) for c in getattr(m, "tool_calls", [])])
                for m in messages]

    assert said(resumed) == said(expected)
