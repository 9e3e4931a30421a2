"""A long-horizon LangGraph agent on the default pair: 30 tool steps whose outputs add up to more than three times
the models' window. Every step answers; the views drop their oldest turns a quarter window at a time, the replies
say how much, and no step prefills more than a window."""

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from asymspec_agents.bench.common import pydoc_text
from langchain_asymspec import ChatAsymSpec

STEPS = 30


def test_thirty_tool_steps_past_three_windows_all_answer_and_show_their_cuts(agent_example):
    llm = ChatAsymSpec(max_tokens=32)
    window = llm.core.engine.context_window
    text = pydoc_text()
    pages = [text[i * 4000:(i + 1) * 4000] for i in range(STEPS)]  # ~1000 tokens each

    read = iter(pages)

    @tool
    def read_next_page() -> str:
        """Read the next page of the Python reference."""
        return next(read, "The reference has no more pages.")  # a new page every step, whatever the model asks: no two tool outputs are the same

    agent = create_agent(llm, [read_next_page], middleware=[agent_example.ToolBudget(STEPS)])
    messages = agent.invoke({"messages": [HumanMessage("Read the reference page by page, then name one statement "
                                                       "it describes.")]}, {"recursion_limit": 2 * STEPS + 5})["messages"]
    results = [m for m in messages if isinstance(m, ToolMessage)]
    replies = [m for m in messages if isinstance(m, AIMessage)]
    assert len(results) == STEPS and len(replies) == STEPS + 1
    assert sum(llm.get_num_tokens(m.text) for m in results) > 3 * window
    assert replies[-1].text.strip() and not replies[-1].tool_calls  # the answer after the last step
    stats = [m.response_metadata["asymspec"] for m in replies]
    cuts = [s["full_view_truncated_tokens"] for s in stats]
    print("\nstep, full view, its cut, verifier's cut, S_full prefill:", *(
        (i, s["full_input_tokens"], s["full_view_truncated_tokens"], s["comp_view_truncated_tokens"],
         s["prefilled_tokens"]["S_full"]) for i, s in enumerate(stats)))
    assert cuts[0] == 0 and cuts[-1] > 2 * window  # the drafter no longer reads the oldest pages
    assert len(set(cuts)) < STEPS // 2  # the cut moves in quarter windows, not every step
    assert all(s["full_input_tokens"] < window and s["prefilled_tokens"]["S_full"] <= window for s in stats)
    for before, after in zip(stats, stats[1:]):
        if after["full_view_truncated_tokens"] == before["full_view_truncated_tokens"]:  # the cut stayed put:
            assert after["prefilled_tokens"]["S_full"] < 1500  # the drafter read its new page, nothing more
