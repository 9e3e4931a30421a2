"""Appending messages must only append tokens: the engine's prefix caches then prefill only the new tokens."""

import threading
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asymspec_agents.context import (AssistantMessage, CompressionPolicy, DualContext, HeadTail, Passage, SystemMessage,
                                     ToolCall, ToolResult, ToolSpec, UserMessage)

WORDS = ["alpha", "beta", "gamma", "error", "file", "line", "42", "weather", "city", "the", "is", "ok", "\n", "x=1;", "é"]
TOOLS = [ToolSpec("search", "Search things.", {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})]
# Short texts, and long ones that exceed the default budgets (tool results 256, passages 128 tokens) so compression runs.
texts = st.one_of(st.lists(st.sampled_from(WORDS), max_size=20), st.lists(st.sampled_from(WORDS), min_size=80, max_size=300)).map(" ".join)


@st.composite
def conversations(draw):
    messages = [SystemMessage(draw(texts))] if draw(st.booleans()) else []
    pending, next_id = [], 0
    for _ in range(draw(st.integers(2, 9))):
        kind = draw(st.sampled_from(["user", "assistant", "system"] + ["tool"] * 2 * bool(pending)))
        if kind == "user":
            passages = [Passage(draw(texts), source="doc") for _ in range(draw(st.integers(0, 2)))]
            messages.append(UserMessage(draw(texts), passages=passages))
        elif kind == "assistant":
            calls = []
            for _ in range(draw(st.integers(0, 2))):
                calls.append(ToolCall(f"call_{next_id}", "search", {"q": draw(texts)[:30]}))
                next_id += 1
            pending += calls
            messages.append(AssistantMessage(draw(texts), tool_calls=calls))
        elif kind == "tool":
            call = pending.pop(0)
            messages.append(ToolResult(call.id, call.name, draw(texts), is_error=draw(st.booleans())))
        else:
            messages.append(SystemMessage(draw(texts)))
    return messages


def is_prefix(short, long):
    return long[: len(short)] == short


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages=conversations(), with_tools=st.booleans(), retrieval=st.booleans())
def test_appending_a_message_only_appends_to_both_views(tok, messages, with_tools, retrieval):
    ctx = DualContext(tok, CompressionPolicy(drafter_budget=200 if retrieval else None))  # the drafter's retrieval view too
    tools = TOOLS if with_tools else None
    previous = None
    for n in range(1, len(messages) + 1):
        views = ctx.render(messages[:n], tools=tools, add_generation_prompt=False)
        if previous is not None:
            assert is_prefix(previous.full_ids, views.full_ids)
            assert is_prefix(previous.comp_ids, views.comp_ids)
        previous = views
    # The generation prompt is the only part of a step that the next step does not keep.
    final = ctx.render(messages, tools=tools)
    assert is_prefix(previous.comp_ids, final.comp_ids) and is_prefix(previous.full_ids, final.full_ids)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages=conversations())
def test_rendering_is_a_function_of_the_conversation_not_of_past_calls(tok, messages):
    warm = DualContext(tok)
    for n in range(1, len(messages)):
        warm.render(messages[:n])
    assert warm.render(messages).comp_ids == DualContext(tok).render(messages).comp_ids


TOPICS = "\n".join(
    [f"alpha fact {i}: the alpha value is {i}" for i in range(20)] + [f"beta fact {i}: the beta value is {i}" for i in range(20)]
)


def test_an_item_keeps_the_compression_of_the_query_it_arrived_with(tok):
    policy = CompressionPolicy(budgets={"passage": 120})
    step1 = [UserMessage("Tell me.", passages=[Passage(TOPICS)])]
    step2 = step1 + [AssistantMessage("Sure."), UserMessage("And now?")]
    ctx = DualContext(tok, policy)
    first = ctx.render(step1, query="alpha value", add_generation_prompt=False)
    second = ctx.render(step2, query="beta value", add_generation_prompt=False)
    assert "alpha fact" in first.comp_text and "beta fact" not in first.comp_text
    assert is_prefix(first.comp_ids, second.comp_ids)  # the passage was not re-selected for the new query
    # Without that memory the same step would select for the new query and break the prefix:
    fresh = DualContext(tok, policy).render(step2, query="beta value", add_generation_prompt=False)
    assert "beta fact" in fresh.comp_text and not is_prefix(first.comp_ids, fresh.comp_ids)


def test_items_new_at_a_step_use_that_steps_query(tok):
    policy = CompressionPolicy(budgets={"passage": 120})
    ctx = DualContext(tok, policy)
    step1 = [UserMessage("Tell me.")]
    ctx.render(step1, query="alpha value")
    views = ctx.render(step1 + [AssistantMessage("ok"), UserMessage("More.", passages=[Passage(TOPICS)])], query="beta value")
    assert "beta fact" in views.comp_text and "alpha fact" not in views.comp_text


def test_without_an_explicit_query_tool_results_are_selected_for_the_user_question_and_the_call(tok):
    messages = [UserMessage("What is the beta value?"), AssistantMessage("", tool_calls=[ToolCall("c1", "lookup", {"fact": 7})]),
                ToolResult("c1", "lookup", TOPICS)]
    views = DualContext(tok, CompressionPolicy(budgets={"tool_result": 64})).render(messages)
    assert "beta fact 7: the beta value is 7" in views.comp_text


class CountingHeadTail(HeadTail):
    def __init__(self):
        super().__init__()
        self.seen = Counter()

    def _compress(self, text, budget, tokens, query):
        self.seen[text] += 1
        return super()._compress(text, budget, tokens, query)


def twenty_step_agent():
    """Yield the whole history at each of 20 agent steps, as frameworks resend it."""
    history = [SystemMessage("You are an agent."), UserMessage("Collect readings 0 to 19.")]
    for step in range(20):
        call = ToolCall(f"call_{step}", "read", {"n": step})
        history = history + [AssistantMessage(f"Reading {step}.", tool_calls=[call]),
                             ToolResult(call.id, "read", f"reading {step}: " + "noise " * 200)]
        yield history


def test_each_message_is_compressed_once_over_a_twenty_step_conversation(tok):
    counting = CountingHeadTail()
    ctx = DualContext(tok, CompressionPolicy(budgets={"tool_result": 64}, compressors={"tool_result": counting}))
    for history in twenty_step_agent():
        views = ctx.render(history, tools=TOOLS)
    assert len(counting.seen) == 20 and set(counting.seen.values()) == {1}
    assert sum(item.cached for item in views.report.items if item.kind == "tool_result") == 19


def test_a_repeated_render_reuses_every_compression_and_tokenization(tok):
    ctx = DualContext(tok)
    history = list(twenty_step_agent())[-1]
    first = ctx.render(history, tools=TOOLS)
    compress_misses, token_misses = ctx.cache.misses, ctx.tokens._cache.misses
    second = ctx.render(history, tools=TOOLS)
    assert (ctx.cache.misses, ctx.tokens._cache.misses) == (compress_misses, token_misses)
    assert second.comp_ids == first.comp_ids


def test_concurrent_renders_of_one_context_agree(tok):
    ctx = DualContext(tok)
    history = list(twenty_step_agent())[-1]
    expected = DualContext(tok).render(history, tools=TOOLS).comp_ids
    results = []
    threads = [threading.Thread(target=lambda: results.append(ctx.render(history, tools=TOOLS).comp_ids)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and all(result == expected for result in results)
