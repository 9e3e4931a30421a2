"""A hand-built LangGraph `StateGraph` with a `ToolNode`, checkpointed in SQLite.

Imported by the tests; run as a script it resumes a checkpointed thread in a fresh process:

    python graph_app.py DB_PATH THREAD_ID "follow-up question"   # prints a JSON report on stdout
"""

import json
import sqlite3
import sys
from pathlib import Path

from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition


def build_graph(llm, tools, checkpointer=None):
    """model -> (tool calls?) -> tools -> model -> answer. One tool call per question: the model must call a tool
    when the last message is the user's, and answers (no tools) once the tool result is in."""

    def call_model(state: MessagesState):
        after_tool = isinstance(state["messages"][-1], ToolMessage)
        model = llm.bind_tools(tools, tool_choice="none" if after_tool else "any")
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)


def sqlite_saver(path) -> SqliteSaver:
    return SqliteSaver(sqlite3.connect(str(path), check_same_thread=False))


def resume(db_path: str, thread_id: str, question: str) -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from conftest import load_example

    from langchain_asymspec import ChatAsymSpec

    example = load_example("langgraph_agent")
    tools = example.make_tools(example.ReferenceSearch(example.python_reference()))
    llm = ChatAsymSpec(verifier="bundled", drafter="bundled", max_tokens=48)
    app = build_graph(llm, tools, sqlite_saver(db_path))
    config = {"configurable": {"thread_id": thread_id}}
    before = app.get_state(config).values["messages"]
    views = llm.render_views(before, tools)
    after = app.invoke({"messages": [HumanMessage(question)]}, config)["messages"]
    return {"before": len(before), "after": len(after), "full_ids": views.full_ids, "comp_ids": views.comp_ids,
            "kinds": [type(m).__name__ for m in after],
            "stats": [m.response_metadata.get("asymspec") for m in after if m.type == "ai"]}


if __name__ == "__main__":
    print(json.dumps(resume(*sys.argv[1:4])))
