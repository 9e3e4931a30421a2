"""One ChatAsymSpec serving many LangGraph conversations at once (the engine's cache pool): four threads stepped
in interleaved rounds, each round's calls concurrent, and a fan-out graph whose parallel branches call the model
together. Every reply equals its serial twin; every step after a thread's first reads only its new tokens."""

import asyncio
import operator
from typing import Annotated, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from langchain_asymspec import ChatAsymSpec

pytestmark = pytest.mark.integration

THREADS = {"t-apples": "apples", "t-rivers": "rivers", "t-owls": "owls", "t-copper": "copper"}
STEPS = 3


def question(subject: str, step: int) -> HumanMessage:
    return HumanMessage(f"Tell me one short fact about {subject} (fact {step + 1}).")


def replies(messages) -> list[AIMessage]:
    return [m for m in messages if isinstance(m, AIMessage)]


@pytest.fixture(scope="module")
def llm():
    return ChatAsymSpec(verifier="bundled", drafter="bundled", max_tokens=16)


def test_four_threads_stepped_in_concurrent_rounds_each_prefill_only_their_new_tokens_and_equal_serial(llm):
    agent = create_agent(llm, tools=[], checkpointer=InMemorySaver())

    def config(thread):
        return {"configurable": {"thread_id": thread}}

    async def rounds():
        for step in range(STEPS):  # every round: all four threads' next step at once
            await asyncio.gather(*(agent.ainvoke({"messages": [question(subject, step)]}, config(thread))
                                   for thread, subject in THREADS.items()))

    asyncio.run(rounds())
    serial_agent = create_agent(llm, tools=[], checkpointer=InMemorySaver())
    for thread, subject in THREADS.items():
        for step in range(STEPS):
            serial_agent.invoke({"messages": [question(subject, step)]}, config(thread + "-serial"))
        together = replies(agent.get_state(config(thread)).values["messages"])
        alone = replies(serial_agent.get_state(config(thread + "-serial")).values["messages"])
        assert [m.content for m in together] == [m.content for m in alone], thread
        previous = None
        for message in together:
            stats = message.response_metadata["asymspec"]
            if previous is not None:  # the history came from this thread's own cache set
                assert stats["cache"] == "continued", (thread, stats)
                grown = {"full": stats["full_input_tokens"] - previous["full_input_tokens"],
                         "comp": stats["compressed_input_tokens"] - previous["compressed_input_tokens"]}
                for stream, prefilled in stats["prefilled_tokens"].items():
                    assert prefilled <= grown[stream.split("_")[1]], (thread, stream, stats)
            previous = stats


class FanOut(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


ANGLES = ["its history", "its uses", "one surprising detail"]


def test_parallel_branches_of_a_fan_out_graph_give_the_serial_replies(llm):
    def branch(angle):
        def node(state: FanOut) -> dict:
            reply = llm.invoke([HumanMessage(f"We are writing about {state['topic']}."), AIMessage("Good, go on."),
                                HumanMessage(f"In one sentence: {angle}.")])
            return {"notes": [f"{angle}: {reply.content}"]}
        return node

    graph = StateGraph(FanOut)
    for i, angle in enumerate(ANGLES):
        graph.add_node(f"branch_{i}", branch(angle))
        graph.add_edge(START, f"branch_{i}")
        graph.add_edge(f"branch_{i}", END)
    notes = graph.compile().invoke({"topic": "lighthouses", "notes": []})["notes"]
    serial = [f"{angle}: " + llm.invoke([HumanMessage("We are writing about lighthouses."), AIMessage("Good, go on."),
                                         HumanMessage(f"In one sentence: {angle}.")]).content for angle in ANGLES]
    assert sorted(notes) == sorted(serial)
