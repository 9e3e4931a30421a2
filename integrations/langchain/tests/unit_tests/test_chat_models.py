"""ChatAsymSpec on a tiny random model pair: one output path for invoke/stream/async, grammar-constrained tools and
structured output, usage and stats metadata, per-call settings, and cancellation that leaves the caches usable."""

import asyncio
from typing import Literal

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from pydantic import BaseModel

from asymspec_agents import AsymSpecEngine
from asymspec_agents.errors import ConfigError, InvalidInputError
from asymspec_agents.models import resolve_pair
from asymspec_agents.testing import tiny_random_pair
from langchain_asymspec import ChatAsymSpec
from asymspec_agents.aio import iterate_in_thread


def get_weather(city: Literal["Paris", "Rome", "Oslo"]) -> str:
    """Current weather of a city."""
    return "sunny"


def get_time() -> str:
    """The current time."""
    return "noon"


class Pick(BaseModel):
    color: Literal["red", "green", "blue"]
    count: int


@pytest.fixture(scope="module")
def engine():
    pair = tiny_random_pair(seed=0)
    return AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)


@pytest.fixture
def llm(engine):
    return ChatAsymSpec(engine=engine, max_tokens=96)  # byte-level tokens: a tool call is ~60 of them


QUESTION = [HumanMessage("What is the weather in Paris?")]


def merged(chunks) -> AIMessageChunk:
    full = None
    for chunk in chunks:
        full = chunk if full is None else full + chunk
    return full


def test_construction_loads_nothing_and_validates_settings():
    llm = ChatAsymSpec(verifier="no/such-model", drafter=None, mode="compressed")
    assert llm._core is None and llm._get_ls_params()["ls_model_name"] == "no/such-model"
    with pytest.raises(ValueError, match="gamma must lie in"):  # the ConfigError, inside pydantic's ValidationError
        ChatAsymSpec(gamma=2.0)
    with pytest.raises(ValueError, match="max_tokn"):
        ChatAsymSpec(max_tokn=3)  # a misspelt setting is an error, not silently dropped
    default = ChatAsymSpec()  # the default pair: the tuned verifier, its matched drafter (names only: no load)
    assert resolve_pair(default.verifier, default.drafter) == ("bundled-agent", "bundled-agent-small")
    assert default._core is None and default.resolved_model_name == "bundled-agent+bundled-agent-small"
    assert ChatAsymSpec(fuse_bonus=False, preset="paper").preset == "paper"
    assert resolve_pair("bundled-agent", "auto") == ("bundled-agent", "bundled-agent-small")
    assert resolve_pair("bundled", "auto") == ("bundled", "bundled-small")  # the raw model keeps its own drafter
    with pytest.raises(ConfigError, match="knows no drafter"):  # "auto" names no drafter for an unknown verifier
        resolve_pair("some/hub-model", "auto")


def test_forced_tool_call_is_the_same_from_invoke_and_stream(llm):
    bound = llm.bind_tools([get_weather, get_time], tool_choice="any")
    invoked = bound.invoke(QUESTION)
    streamed = merged(bound.stream(QUESTION))
    assert len(invoked.tool_calls) == 1 and invoked.tool_calls[0]["name"] in {"get_weather", "get_time"}
    strip = lambda calls: [{k: v for k, v in c.items() if k != "id"} for c in calls]  # ids are fresh per call
    assert strip(invoked.tool_calls) == strip(streamed.tool_calls)
    assert invoked.response_metadata["finish_reason"] == "tool_calls"
    if invoked.tool_calls[0]["name"] == "get_weather":
        assert invoked.tool_calls[0]["args"]["city"] in {"Paris", "Rome", "Oslo"}


def test_a_named_tool_choice_calls_that_tool(llm):
    message = llm.bind_tools([get_weather, get_time], tool_choice="get_time").invoke(QUESTION)
    assert [(c["name"], c["args"]) for c in message.tool_calls] == [("get_time", {})]


def test_a_call_cut_off_by_max_tokens_lands_in_invalid_tool_calls(llm):
    bound = llm.bind_tools([get_weather], tool_choice="any")
    for message in (bound.invoke(QUESTION, max_tokens=20), merged(bound.stream(QUESTION, max_tokens=20))):
        assert message.tool_calls == [] and len(message.invalid_tool_calls) == 1
        assert message.invalid_tool_calls[0]["args"].startswith("not valid JSON")


def test_tool_choice_none_keeps_the_tools_in_view_and_makes_no_calls(llm):
    message = llm.bind_tools([get_weather], tool_choice="none").invoke(QUESTION)
    assert message.tool_calls == [] and message.invalid_tool_calls == [] and "<tool_call>" not in message.content
    # the tools block stays (as with OpenAI's "none"): the conversation's other steps share this prompt's cache
    assert message.usage_metadata["input_tokens"] == llm.get_num_tokens_from_messages(QUESTION, tools=[get_weather])


def test_tool_choice_naming_an_unbound_tool_is_an_input_error(llm):
    with pytest.raises(InvalidInputError, match="names no bound tool"):
        llm.bind_tools([get_weather], tool_choice="get_time")


def test_every_message_carries_usage_and_speculation_stats(llm):
    message = llm.invoke(QUESTION)
    usage, stats = message.usage_metadata, message.response_metadata["asymspec"]
    assert usage["input_tokens"] == llm.get_num_tokens_from_messages(QUESTION) == stats["compressed_input_tokens"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] and usage["output_tokens"] > 0
    assert stats["mode"] == "asymmetric" and 0 <= stats["acceptance_rate"] <= 1 and stats["drafted"] >= stats["accepted"]
    assert message.response_metadata["model_name"] and message.response_metadata["finish_reason"] in {"stop", "length"}


def test_streaming_counts_usage_once_on_the_last_chunk(llm):
    chunks = list(llm.stream(QUESTION))
    with_usage = [c for c in chunks if c.usage_metadata]
    assert len(with_usage) == 1 and chunks[-1] is with_usage[0] and chunks[-1].chunk_position == "last"
    assert merged(chunks).content == llm.invoke(QUESTION).content  # greedy: the same reply


def test_a_tool_history_with_an_error_result_renders_and_replies(llm):
    history = [*QUESTION, AIMessage("", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "c1"}]),
               ToolMessage("Error: service down", tool_call_id="c1", status="error")]
    views = llm.render_views(history, tools=[get_weather])
    assert 'status="error"' in views.full_text and "Error: service down" in views.comp_text
    assert isinstance(llm.bind_tools([get_weather]).invoke(history), AIMessage)


def test_per_call_settings_apply_and_unknown_ones_raise(llm):
    assert llm.invoke(QUESTION, max_tokens=3).usage_metadata["output_tokens"] <= 3
    with pytest.raises(InvalidInputError, match="Unknown call arguments"):
        llm.invoke(QUESTION, frequency_penalty=1.0)
    with pytest.raises(InvalidInputError, match="serves"):
        llm.invoke(QUESTION, model="another-model")


def test_stop_strings_end_the_reply_and_are_not_emitted(llm):
    free = llm.invoke(QUESTION, max_tokens=24).text
    assert len(free) > 4
    stop = free[2:4]
    stopped = llm.invoke(QUESTION, max_tokens=24, stop=[stop])
    assert stop not in stopped.text and free.startswith(stopped.text)


def test_structured_output_is_grammar_constrained_for_every_method(llm):
    for method in ("json_schema", "function_calling", "json_mode"):
        result = llm.with_structured_output(Pick, method=method, include_raw=True).invoke(QUESTION, max_tokens=120)
        assert result["parsing_error"] is None, (method, result["raw"])
        assert isinstance(result["parsed"], Pick)


def test_json_schema_dicts_give_dicts(llm):
    schema = {"title": "Pick", "type": "object", "properties": {"color": {"enum": ["red", "blue"]}}, "required": ["color"]}
    assert llm.with_structured_output(schema).invoke(QUESTION)["color"] in {"red", "blue"}


async def test_async_paths_give_the_same_replies_as_sync(llm):
    bound = llm.bind_tools([get_weather, get_time], tool_choice="any")
    sync, async_ = bound.invoke(QUESTION), await bound.ainvoke(QUESTION)
    assert [c["name"] for c in sync.tool_calls] == [c["name"] for c in async_.tool_calls]
    assert [c["args"] for c in sync.tool_calls] == [c["args"] for c in async_.tool_calls]
    chunks = [chunk async for chunk in llm.astream(QUESTION)]
    assert merged(chunks).content == llm.invoke(QUESTION).content


async def test_the_engine_runs_off_the_event_loop(llm):
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    task = asyncio.create_task(ticker())
    await llm.ainvoke(QUESTION)
    task.cancel()
    assert ticks > 0


async def test_a_cancelled_call_leaves_the_engine_usable_and_its_caches_consistent(engine):
    llm = ChatAsymSpec(engine=engine, max_tokens=40, k_max=2)
    expected = llm.invoke(QUESTION).content
    other = [HumanMessage("Something else entirely, with other tokens.")]
    whole = len(list(llm.stream(other)))
    received = []

    async def consume():
        async for chunk in llm.astream(other):
            received.append(chunk)
            await asyncio.sleep(0.05)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert 0 < len(received) < whole  # cancelled mid-reply
    assert (await llm.ainvoke(QUESTION)).content == expected  # served from caches cropped by the cancelled call


async def test_iterate_in_thread_closes_the_iterator_when_abandoned():
    closed = []

    def numbers():
        try:
            yield from range(100)
        finally:
            closed.append(True)

    stream = iterate_in_thread(numbers)
    assert [await stream.__anext__() for _ in range(3)] == [0, 1, 2]
    await stream.aclose()
    assert closed == [True]


def test_models_are_shared_per_engine_and_policy(engine):
    first, second = ChatAsymSpec(engine=engine), ChatAsymSpec(engine=engine, temperature=0.5)
    assert first.core is second.core  # one dual-view memory and grammar compiler per engine and policy


def test_an_image_block_is_read_as_its_stand_in_and_a_bad_one_is_an_input_error(llm):
    import base64

    from asymspec_agents.testing import png_bytes

    image = {"type": "image", "base64": base64.b64encode(png_bytes()).decode(), "mime_type": "image/png"}
    with_image = [HumanMessage([{"type": "text", "text": "What is on the screen?"}, image])]
    reply = llm.invoke(with_image, max_tokens=4)  # an ImageWarning, once per memory (tested in the core)
    plain = llm.invoke([HumanMessage("What is on the screen?")], max_tokens=4)
    assert reply.usage_metadata["input_tokens"] > plain.usage_metadata["input_tokens"]  # "[image]" is read
    broken = [HumanMessage([image | {"base64": base64.b64encode(b"no image").decode()}])]
    with pytest.raises(InvalidInputError, match="not an image that can be read"):
        llm.invoke(broken)
