"""AsymSpecMiddleware with LangChain's own context middleware, in real `create_agent` graphs on the bundled pair:
the drafter's view holds every original message, the verifier's view is exactly what the user's middleware made."""

import sqlite3

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (AgentMiddleware, ClearToolUsesEdit, ContextEditingMiddleware,
                                         SummarizationMiddleware)
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, trim_messages
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langchain_asymspec import AsymSpecMiddleware, ChatAsymSpec
from langchain_asymspec.messages import with_later_messages
from langchain_asymspec.middleware import is_summary

pytestmark = pytest.mark.integration

NOTES = [  # one ~120-token paragraph per user turn: the history outgrows the triggers below within a few turns
    "Note about the garden: the tomatoes were planted in April along the south fence, the basil went in beside "
    "them, and the watering can is kept in the blue shed next to the compost bins. " * 2,
    "Note about the car: the tyres were changed in October, the spare key hangs on the hook by the door, and "
    "the next service is due after fifteen thousand kilometres or in March, whichever comes first. " * 2,
    "Note about the kitchen: the kettle descaler is under the sink, the oven timer runs five minutes fast, and "
    "the good knives are in the drawer to the left of the stove, not in the block. " * 2,
    "Note about the bicycle: the chain was oiled last week, the rear brake pads are worn, and the lock code "
    "is written on the back of the calendar in the hallway. " * 2,
]
CODE_DOCUMENT = ("Server room handbook. " + "Racks are labelled from A to F; cables run under the floor. " * 25
                 + "The access code of the server room is 5969. " + "Visitors sign the book at the desk. " * 25)


class Recorder(AgentMiddleware):
    """Innermost: what each model call receives (the verifier's messages and the drafter's full_messages)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def wrap_model_call(self, request, handler):
        response = handler(request)
        self.calls.append({"messages": [request.system_message, *request.messages] if request.system_message
                           else list(request.messages), "full": request.model_settings.get("full_messages"),
                           "reply": response.result[-1] if hasattr(response, "result") else response})
        return response


class TrimTo(AgentMiddleware):
    """The user's own trimming: the last `tokens` tokens of the conversation (langchain_core.trim_messages)."""

    def __init__(self, llm, tokens: int):
        super().__init__()
        self.llm, self.tokens = llm, tokens

    def wrap_model_call(self, request, handler):
        kept = trim_messages(request.messages, max_tokens=self.tokens, token_counter=self.llm, strategy="last",
                             start_on="human")
        return handler(request.override(messages=kept))


@pytest.fixture(scope="module")
def llm():
    return ChatAsymSpec(verifier="bundled", drafter="bundled", max_tokens=24)


def talk(agent, thread: str, notes) -> None:
    for note in notes:
        agent.invoke({"messages": [HumanMessage(note + " Please remember it.")]}, {"configurable": {"thread_id": thread}})


def assert_views_match_the_middleware(llm, recorder, originals):
    """Every call: the full view holds every original message so far; the counts equal a render of exactly the
    (verifier messages, drafter messages) the call received."""
    assert recorder.calls
    for call in recorder.calls:
        full_texts = [m.text for m in call["full"]]
        seen = [text for text in originals if any(text == t for t in full_texts)]
        assert all(not is_summary(m) for m in call["full"])
        views = llm.render_views(call["messages"], full_messages=call["full"])
        stats = call["reply"].response_metadata["asymspec"]
        assert (stats["full_input_tokens"], stats["compressed_input_tokens"]) == (len(views.full_ids), len(views.comp_ids))
        assert seen == originals[:len(seen)] and seen
    return recorder.calls[-1]


def test_summarization_middleware_the_drafter_reads_the_messages_the_summary_replaced(llm):
    recorder = Recorder()
    summarize = SummarizationMiddleware(model=llm, trigger=("tokens", 350), keep=("messages", 2))
    agent = create_agent(llm, tools=[], middleware=[AsymSpecMiddleware(), summarize, recorder],
                         checkpointer=InMemorySaver())
    talk(agent, "s", NOTES)
    state = agent.get_state({"configurable": {"thread_id": "s"}}).values
    assert any(is_summary(m) for m in state["messages"])  # the summary replaced the old turns in the state ...
    originals = [note + " Please remember it." for note in NOTES]
    history = [m.text for m in state["asymspec_history"] if isinstance(m, HumanMessage)]
    assert history == originals  # ... the middleware's history kept them all
    last = assert_views_match_the_middleware(llm, recorder, originals)
    assert any(is_summary(m) for m in last["messages"])  # the verifier read the summary, the drafter all four notes
    assert sum(text in [m.text for m in last["full"]] for text in originals) == len(NOTES)
    stats = last["reply"].response_metadata["asymspec"]
    assert stats["full_input_tokens"] > stats["compressed_input_tokens"]


def test_trim_messages_the_verifier_reads_the_trimmed_tail_the_drafter_everything(llm):
    recorder = Recorder()
    agent = create_agent(llm, tools=[], middleware=[AsymSpecMiddleware(), TrimTo(llm, 250), recorder],
                         checkpointer=InMemorySaver())
    talk(agent, "t", NOTES)
    originals = [note + " Please remember it." for note in NOTES]
    last = assert_views_match_the_middleware(llm, recorder, originals)
    assert NOTES[0] + " Please remember it." not in [m.text for m in last["messages"]]  # trimmed away
    stats = [c["reply"].response_metadata["asymspec"] for c in recorder.calls]
    # append-stability, measured: the drafter's full view only grows, so each step prefills only its new tokens
    for before, after in zip(stats, stats[1:]):
        assert after["prefilled_tokens"]["S_full"] <= after["full_input_tokens"] - before["full_input_tokens"]


@tool
def read_handbook() -> str:
    """Read the building handbook."""
    return CODE_DOCUMENT


HANDBOOK_REQUEST = "Read the handbook: I need the server room's access code."


def cleared_handbook_agent(llm, example, question: str, *inner):
    """One forced call reads the handbook, then `question` is asked; ClearToolUsesEdit clears the tool output
    from the verifier's view (the drafter keeps it). `inner`: middleware after the budget."""
    budget = example.ToolBudget(1, answer_prompt=question)
    clear = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=300, keep=0)])
    return create_agent(llm, [read_handbook], middleware=[AsymSpecMiddleware(), clear, budget, *inner])


def test_context_editing_a_cleared_tool_result_is_still_answered_from_the_drafters_view(agent_example):
    """Identical pair, fused rule, β = 1: AsymSpec equals the verifier on the full view (docs/design.md §5.2), so
    the fact in the cleared tool output is answered exactly as the full-context model answers it."""
    fused = ChatAsymSpec(drafter="bundled", max_tokens=32, acceptance="fused")
    recorder = Recorder()
    agent = cleared_handbook_agent(fused, agent_example, "Now answer: what is the access code?", recorder)
    messages = agent.invoke({"messages": [HumanMessage(HANDBOOK_REQUEST)]})["messages"]
    assert isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls
    final = recorder.calls[-1]
    tool_results = [m for m in final["messages"] if isinstance(m, ToolMessage)]
    assert tool_results and all("5969" not in m.text for m in tool_results)  # the verifier's copy was cleared
    assert any("5969" in m.text for m in final["full"] if isinstance(m, ToolMessage))  # the drafter's was not
    # the verifier alone on the drafter's view of the same call (tool_choice "none": the tools shown, no call)
    ceiling = ChatAsymSpec(verifier="bundled", max_tokens=32, mode="full").bind_tools(
        [read_handbook], tool_choice="none").invoke(with_later_messages(final["full"], final["messages"]))
    assert messages[-1].content == ceiling.content


def test_with_the_distilled_drafter_the_cleared_fact_is_recovered_and_the_verifier_alone_misses_it(agent_example):
    """The default pair (the paper's rule with the bonus fused) on two phrasings of the question: at least one is
    answered 5969 from the drafter's uncleared view (with the raw pair bundled + bundled-small, the second; the
    first got "a password"); the verifier alone on the cleared view answers neither."""
    def answer(question, **settings):
        agent = cleared_handbook_agent(ChatAsymSpec(max_tokens=32, **settings), agent_example, question)
        return agent.invoke({"messages": [HumanMessage(HANDBOOK_REQUEST)]})["messages"][-1].content

    questions = ("Now answer: what is the access code?", "What is the access code of the server room? Give the code.")
    assert sum("5969" in answer(q) for q in questions) >= 1
    assert not any("5969" in answer(q, mode="compressed") for q in questions)


def test_the_saved_history_survives_a_sqlite_checkpointer_resume(llm, tmp_path):
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = tmp_path / "threads.sqlite"
    summarize = SummarizationMiddleware(model=llm, trigger=("tokens", 350), keep=("messages", 2))
    with sqlite3.connect(path, check_same_thread=False) as connection:
        agent = create_agent(llm, tools=[], middleware=[AsymSpecMiddleware(), summarize],
                             checkpointer=SqliteSaver(connection))
        talk(agent, "r", NOTES[:3])
    recorder = Recorder()
    with sqlite3.connect(path, check_same_thread=False) as connection:  # a new connection, a new agent
        agent = create_agent(llm, tools=[], middleware=[AsymSpecMiddleware(), summarize, recorder],
                             checkpointer=SqliteSaver(connection))
        talk(agent, "r", NOTES[3:])
        state = agent.get_state({"configurable": {"thread_id": "r"}}).values
    assert any(is_summary(m) for m in state["messages"])
    assert [m.text for m in state["asymspec_history"] if isinstance(m, HumanMessage)] == \
        [note + " Please remember it." for note in NOTES]
    assert NOTES[0] + " Please remember it." in [m.text for m in recorder.calls[-1]["full"]]
