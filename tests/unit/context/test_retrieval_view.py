"""The drafter's retrieval view (`CompressionPolicy.drafter_budget`): long passages and tool results reach the
drafter as their BM25 selection for the query; the verifier's view is what it would be without it."""

import pytest

from asymspec_agents.context import (AssistantMessage, CompressionPolicy, DualContext, Passage, SystemMessage,
                                     ToolCall, ToolResult, UserMessage)
from asymspec_agents.errors import ConfigError

FILLER = "\n".join(f"line {i}: the weather report for sector {i} is calm and unremarkable." for i in range(120))
NEEDLE = "The access code of the harbour archive is 7316."
DOCUMENT = FILLER.replace("line 60:", NEEDLE + "\nline 60:")
QUESTION = "What is the access code of the harbour archive?"
HEAD_TAIL = {"budgets": {"passage": 600, "tool_result": 600}, "compressors": {"passage": "head_tail", "tool_result": "head_tail"}}


def ask(document=DOCUMENT):
    return [SystemMessage("Answer from the document."), UserMessage(QUESTION, passages=[Passage(document)])]


def test_the_drafter_reads_the_selection_for_the_question_within_its_budget(tok):
    views = DualContext(tok, CompressionPolicy(**HEAD_TAIL, drafter_budget=400)).render(ask())
    whole = DualContext(tok, CompressionPolicy(**HEAD_TAIL)).render(ask())
    assert NEEDLE in views.full_text and NEEDLE not in views.comp_text  # head/tail dropped it; retrieval kept it
    passage = views.full_text.split("<document id=\"1\">\n")[1].split("\n</document>")[0]
    assert len(tok.encode(passage, add_special_tokens=False)) <= 400 < len(tok.encode(DOCUMENT, add_special_tokens=False))
    assert views.comp_ids == whole.comp_ids  # the verifier's view does not change
    assert len(views.full_ids) < len(whole.full_ids) and views.full_ids == tok.encode(views.full_text, add_special_tokens=False)


def test_short_items_and_messages_stay_whole(tok):
    short = "The access code is 7316."
    messages = [UserMessage(FILLER), AssistantMessage("ok"), UserMessage(QUESTION, passages=[Passage(short)])]
    views = DualContext(tok, CompressionPolicy(drafter_budget=400)).render(messages)
    assert FILLER in views.full_text and short in views.full_text  # user text is never selected, short items whole


def test_tool_results_are_selected_for_the_question_and_the_call(tok):
    messages = [UserMessage(QUESTION), AssistantMessage("", tool_calls=[ToolCall("c1", "read_archive", {})]),
                ToolResult("c1", "read_archive", DOCUMENT)]
    views = DualContext(tok, CompressionPolicy(**HEAD_TAIL, drafter_budget=400)).render(messages)
    assert NEEDLE in views.full_text and NEEDLE not in views.comp_text


def test_appending_messages_appends_to_the_retrieval_view(tok):
    ctx = DualContext(tok, CompressionPolicy(**HEAD_TAIL, drafter_budget=400))
    first = ctx.render(ask(), add_generation_prompt=False)
    later = ask() + [AssistantMessage("7316"), UserMessage("And the weather in sector 3?")]
    second = ctx.render(later, query="weather sector 3", add_generation_prompt=False)
    assert second.full_ids[: len(first.full_ids)] == first.full_ids  # the passage keeps the query it arrived with


def test_both_read_everything_while_the_conversation_fits_the_total_budget(tok):
    policy = CompressionPolicy(**HEAD_TAIL, drafter_budget=400, total_budget=100_000)
    views = DualContext(tok, policy).render(ask())
    assert DOCUMENT in views.full_text and views.full_ids == views.comp_ids


def test_render_pair_gives_the_drafter_the_retrieval_view_of_its_own_conversation(tok):
    ctx = DualContext(tok, CompressionPolicy(drafter_budget=400))
    views = ctx.render_pair(ask(), ask("(the document, summarised by the caller)"))
    assert NEEDLE in views.full_text and FILLER not in views.full_text
    assert "summarised by the caller" in views.comp_text


@pytest.mark.parametrize("budget", [0, 15, 2.5, True])
def test_a_bad_drafter_budget_is_refused(budget):
    with pytest.raises(ConfigError, match="drafter_budget"):
        CompressionPolicy(drafter_budget=budget)
