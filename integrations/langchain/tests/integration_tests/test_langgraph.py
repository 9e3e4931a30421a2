"""ChatAsymSpec unchanged inside LangGraph: `create_agent`, `create_react_agent` with `stream_mode="messages"`, and a
hand-built StateGraph with a ToolNode and a SQLite checkpointer resumed in a new process. Real tools (a search over
Python's language reference, a calculator), the bundled SmolLM2-135M pair, several steps each."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent
QUESTION = "Which Python statement leaves a loop early, and which one skips to the next iteration?"


def graph_app():
    spec = importlib.util.spec_from_file_location("graph_app", HERE / "graph_app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_speculation_stats_on_every_ai_message(messages):
    ai = [m for m in messages if isinstance(m, AIMessage)]
    assert ai
    for message in ai:
        stats = message.response_metadata["asymspec"]
        assert stats["mode"] == "asymmetric" and stats["drafted"] >= stats["accepted"] >= 0
        assert message.usage_metadata["input_tokens"] == stats["compressed_input_tokens"] > 0
        if message.tool_calls:  # the tool name is a decision point, committed by the verifier at slot 0
            assert stats["decision_points"] >= 1
        assert stats["decision_points_at_slot0"] == stats["decision_points"]


def assert_tool_results_consumed(llm, messages, tools, exact: bool = False):
    """Each tool result is in what the model read for its answer: whole in the full view, and compressed (or whole)
    in the compressed view. The answer step read at least that conversation (exactly it, when the graph adds no
    system prompt or instruction of its own)."""
    results = [m for m in messages if isinstance(m, ToolMessage)]
    last_ai = max(i for i, m in enumerate(messages) if isinstance(m, AIMessage))
    views = llm.render_views(messages[:last_ai], tools)  # tool_choice="none" keeps the tools in view
    for result in results:
        assert result.text.strip() and result.text.strip()[:40] in views.full_text
        assert f'<tool_response name="{result.name}"' in views.comp_text
    read = messages[last_ai]
    full, comp = read.response_metadata["asymspec"]["full_input_tokens"], read.usage_metadata["input_tokens"]
    if exact:
        assert (full, comp) == (len(views.full_ids), len(views.comp_ids))
    else:
        assert full >= len(views.full_ids) and comp >= len(views.comp_ids)


async def test_create_agent_calls_two_tools_consumes_results_and_answers(llm, agent_example, docs_tools):
    agent = agent_example.build_agent(llm, docs_tools, calls=2)
    messages = (await agent.ainvoke({"messages": [HumanMessage(QUESTION)]}))["messages"]
    kinds = [type(m).__name__ for m in messages]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage", "ToolMessage", "AIMessage"], kinds
    assert all(m.tool_calls[0]["name"] in {"search_python_docs", "calculator"} for m in messages[1:5:2])
    assert messages[-1].text.strip() and not messages[-1].tool_calls  # the final answer
    assert_speculation_stats_on_every_ai_message(messages)
    assert_tool_results_consumed(llm, messages, docs_tools)
    answer = messages[-1].response_metadata["asymspec"]
    assert answer["compressed_input_tokens"] < answer["full_input_tokens"]  # the verifier read compressed results


def test_create_react_agent_streams_the_same_tool_calls_in_messages_mode(llm, docs_tools):
    from langgraph.prebuilt import create_react_agent

    def model(state, runtime):  # call a tool first, then answer from its result
        after_tool = isinstance(state["messages"][-1], ToolMessage)
        return llm.bind_tools(docs_tools, tool_choice="none" if after_tool else "any")

    agent = create_react_agent(model, docs_tools)
    streamed: dict[str, AIMessageChunk] = {}
    final = None
    for mode, payload in agent.stream({"messages": [HumanMessage("What does the Python 'yield' statement do?")]},
                                      stream_mode=["messages", "values"]):
        if mode == "messages" and isinstance(payload[0], AIMessageChunk):
            chunk = payload[0]
            streamed[chunk.id] = chunk if chunk.id not in streamed else streamed[chunk.id] + chunk
        elif mode == "values":
            final = payload["messages"]
    ai = [m for m in final if isinstance(m, AIMessage)]
    assert len(ai) == 2 and ai[0].tool_calls and not ai[1].tool_calls and ai[1].text.strip()
    assert isinstance(final[2], ToolMessage) and final[2].tool_call_id == ai[0].tool_calls[0]["id"]
    for message in ai:  # the streamed chunks add up to the stored message: same text, same calls, same ids
        merged = streamed[message.id]
        assert merged.text == message.text and merged.tool_calls == message.tool_calls
    assert_speculation_stats_on_every_ai_message(final)
    assert_tool_results_consumed(llm, final, docs_tools, exact=True)


def test_state_graph_thread_resumes_in_a_new_process_with_the_same_dual_view_memory(llm, docs_tools, tmp_path):
    app_module = graph_app()
    db = tmp_path / "threads.sqlite"
    app = app_module.build_graph(llm, docs_tools, app_module.sqlite_saver(db))
    config = {"configurable": {"thread_id": "t1"}}
    first = app.invoke({"messages": [HumanMessage("What does the Python 'pass' statement do?")]}, config)["messages"]
    assert [type(m).__name__ for m in first] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert_speculation_stats_on_every_ai_message(first)
    views = llm.render_views(first, docs_tools)
    assert len(views.comp_ids) < len(views.full_ids)  # the reference section was compressed for the verifier

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(HERE / "graph_app.py"), str(db), "t1", "And what does 'del' do?"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["before"] == len(first)
    assert report["full_ids"] == views.full_ids and report["comp_ids"] == views.comp_ids  # rebuilt identically
    assert report["kinds"][: len(first)] == [type(m).__name__ for m in first]
    assert report["kinds"][len(first):] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert all(stats and stats["mode"] == "asymmetric" for stats in report["stats"])
