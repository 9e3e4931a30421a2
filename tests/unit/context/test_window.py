"""Past the models' window: a view keeps its first turns (system, tools, request) and its latest turns, drops whole old turns a quarter window
at a time (so the cut stays put while the conversation grows), says how much it dropped, or raises if asked to."""

import warnings

import pytest

from asymspec_agents import AsymSpecEngine, ContextTooLongError, GenerationConfig
from asymspec_agents.chat import AsymSpecChat, WindowWarning
from asymspec_agents.context import (AssistantMessage, CompressionPolicy, DualContext, SystemMessage, ToolCall,
                                     ToolResult, ToolSpec, UserMessage)
from asymspec_agents.testing import tiny_random_pair

SEARCH = ToolSpec("search", "Search the notes.", {"type": "object", "properties": {"q": {"type": "string"}}})
WINDOW = 4000  # byte tokens: a step (call and result) has about 350


def agent_steps(steps: int) -> list:
    """A system prompt, a request, then `steps` tool calls each with a 200-byte result."""
    messages = [SystemMessage("You answer from the notes."), UserMessage("Find the code of the server room.")]
    for step in range(steps):
        messages += [AssistantMessage("", tool_calls=[ToolCall(f"c{step}", "search", {"q": f"page {step}"})]),
                     ToolResult(f"c{step}", "search", f"Page {step}: " + "routine upkeep notes. " * 9)]
    return messages


def test_a_view_that_fits_is_untouched(tok):
    views = DualContext(tok).render(agent_steps(2), tools=[SEARCH], window=WINDOW)
    assert views.truncated == {} and views.full_ids == DualContext(tok).render(agent_steps(2), tools=[SEARCH]).full_ids


def test_past_the_window_the_first_and_latest_turns_stay_and_whole_old_turns_go(tok):
    context = DualContext(tok, CompressionPolicy(budgets={"tool_result": None}))  # the views alike: both cut
    whole = context.render(agent_steps(20), tools=[SEARCH])
    views = context.render(agent_steps(20), tools=[SEARCH], window=WINDOW)
    assert len(whole.full_ids) > WINDOW >= len(views.full_ids)
    assert views.truncated["full"] == len(whole.full_ids) - len(views.full_ids) >= WINDOW // 4
    head = whole.full_text.split("Page 0:")[0].rsplit("<|im_start|>assistant", 1)[0]  # system, tools, request
    assert views.full_text.startswith(head) and "Find the code" in head
    assert "Page 19:" in views.full_text and "Page 0:" not in views.full_text
    assert whole.full_text.endswith(views.full_text[-300:])  # the latest turns, whole
    assert views.truncated["comp"] == views.truncated["full"]


def test_the_cut_moves_in_quarter_windows_so_appending_keeps_the_prefix(tok):
    """While the conversation grows by less than a step the kept prefix is unchanged (its cache stays valid)."""
    context = DualContext(tok)
    cuts, prefixes = [], []
    for steps in range(10, 40):
        views = context.render(agent_steps(steps), tools=[SEARCH], window=WINDOW)
        cuts.append(views.truncated.get("full", 0))
        prefixes.append(views.full_ids)
    moves = sum(a != b for a, b in zip(cuts, cuts[1:]))
    assert 0 < moves < len(cuts) // 2  # cut at most every other step: each move drops at least a quarter window
    for (cut, ids), (next_cut, next_ids) in zip(zip(cuts, prefixes), zip(cuts[1:], prefixes[1:])):
        if cut == next_cut:
            assert next_ids[:len(ids) - 8] == ids[:len(ids) - 8]  # appended to (the generation prompt aside)


def test_on_overflow_error_raises_and_a_too_long_latest_turn_says_what_to_shorten(tok):
    strict = DualContext(tok, CompressionPolicy(on_overflow="error"))
    with pytest.raises(ContextTooLongError, match="on_overflow='truncate'"):
        strict.render(agent_steps(20), tools=[SEARCH], window=WINDOW)
    huge = [UserMessage("x" * 5000)]
    with pytest.raises(ContextTooLongError, match="latest turn alone"):
        DualContext(tok).render(huge, window=WINDOW)


def test_a_chat_past_the_window_answers_and_says_what_its_drafter_did_not_read():
    pair = tiny_random_pair(seed=0, max_positions=8000)
    chat = AsymSpecChat(AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer),
                        policy=CompressionPolicy(budgets={"tool_result": 16}),
                        config=GenerationConfig(max_new_tokens=8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reply = chat.reply(agent_steps(40), tools=[SEARCH])
    summary = reply.summary()
    assert summary["full_view_truncated_tokens"] > 0 and summary["comp_view_truncated_tokens"] == 0
    assert reply.usage.full_input_tokens <= 8000 - 8 and reply.stats.new_tokens > 0
    assert any(issubclass(w.category, WindowWarning) for w in caught)
