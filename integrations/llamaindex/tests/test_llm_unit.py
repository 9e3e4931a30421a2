"""AsymSpecLLM on a tiny random pair: conversions both ways, tool calls (complete and streamed), usage, async."""

import asyncio
import time

import pytest
from llama_index.core import Document, Settings, SummaryIndex
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, MessageRole, TextBlock, ToolCallBlock, VideoBlock
from llama_index.core.callbacks.token_counting import get_tokens_from_response
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.core.tools import FunctionTool
from llama_index.llms.asymspec import AsymSpecLLM, AsymSpecQueryEngine
from llama_index.llms.asymspec.messages import to_core_messages, to_tool_specs

from asymspec_agents import AsymSpecEngine, InvalidInputError
from asymspec_agents.context import AssistantMessage, SystemMessage, ToolResult, UserMessage
from asymspec_agents.errors import InvalidMessageError, InvalidToolSchemaError
from asymspec_agents.testing import png_bytes, tiny_random_pair


def get_weather(city: str) -> str:
    """Current weather of a city."""
    return f"Sunny in {city}."


def get_time() -> str:
    """The current time."""
    return "12:00"


WEATHER = FunctionTool.from_defaults(get_weather)
CLOCK = FunctionTool.from_defaults(get_time)


@pytest.fixture(scope="module")
def llm():
    pair = tiny_random_pair(seed=0)
    return AsymSpecLLM(engine=AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer), max_new_tokens=120)


def user(text):
    return ChatMessage(role=MessageRole.USER, content=text)


# ---------------------------------------------------------------------------------------------------------------
# The class and its metadata


def test_is_a_function_calling_chat_model_with_the_engine_window(llm):
    assert isinstance(llm, FunctionCallingLLM)
    meta = llm.metadata
    assert meta.is_function_calling_model and meta.is_chat_model
    assert meta.context_window == llm.engine.context_window and meta.num_output == 120
    assert meta.model_name.startswith("asymspec:") and "bundled" not in meta.model_name


def test_tokenizer_fn_counts_with_the_verifier_tokenizer(llm):
    text = "Tokens, counted by the verifier."
    assert llm.tokenizer_fn(text) == llm.engine.tokenizer.encode(text, add_special_tokens=False)
    before = Settings._tokenizer
    try:
        llm.use_as_global_tokenizer()
        assert Settings.tokenizer(text) == llm.tokenizer_fn(text)
    finally:
        Settings._tokenizer = before


# ---------------------------------------------------------------------------------------------------------------
# LlamaIndex -> core


def test_image_blocks_by_bytes_path_or_data_url_in_user_and_tool_messages(tmp_path):
    import base64

    (tmp_path / "shot.png").write_bytes(png_bytes(color="green"))
    url = "data:image/png;base64," + base64.b64encode(png_bytes()).decode()
    messages = [ChatMessage(role="user", blocks=[TextBlock(text="See"), ImageBlock(path=tmp_path / "shot.png"),
                                                 ImageBlock(url=url)]),
                ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}]}),
                ChatMessage(role="tool", blocks=[ImageBlock(image=png_bytes()), TextBlock(text="Saved.")],
                            additional_kwargs={"tool_call_id": "c1"})]
    user, _, tool = to_core_messages(messages)
    assert [str(user.images[0].data_or_path), user.images[1].data_or_path] == [str(tmp_path / "shot.png"), png_bytes()]
    assert tool.content == "Saved." and tool.images[0].data_or_path == png_bytes()


@pytest.mark.parametrize("message, says", [
    (ChatMessage(role="user", blocks=[ImageBlock(url="https://example.com/map.png")]), "nothing here fetches images"),
    (ChatMessage(role="assistant", blocks=[ImageBlock(image=png_bytes())]), "images go in user and tool messages"),
])
def test_remote_or_misplaced_image_blocks_are_refused(message, says):
    with pytest.raises(InvalidMessageError, match=says):
        to_core_messages([message])


def test_messages_of_every_role_convert_to_core_messages():
    node = NodeWithScore(node=TextNode(text="Paris is the capital of France.", id_="n1", metadata={"file_name": "fr.txt"}), score=0.7)
    messages = [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", blocks=[TextBlock(text="Weather?"), ImageBlock(image=png_bytes())],
                    additional_kwargs={"passages": [node]}),
        ChatMessage(role="assistant", blocks=[TextBlock(text="Checking."),
                                              ToolCallBlock(tool_call_id="c1", tool_name="get_weather", tool_kwargs={"city": "Paris"})]),
        ChatMessage(role="tool", content="Sunny.", additional_kwargs={"tool_call_id": "c1"}),
        ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}),
        ChatMessage(role="tool", content="noon", additional_kwargs={"tool_call_id": "c2", "name": "get_time"}),
    ]
    system, first, call, result, openai_call, second = to_core_messages(messages)
    assert isinstance(system, SystemMessage) and system.content == "Be brief."
    assert isinstance(first, UserMessage) and first.content == "Weather?"
    assert first.passages[0].text == "Paris is the capital of France." and first.passages[0].source == "fr.txt"
    assert first.passages[0].id == "n1" and first.passages[0].score == 0.7
    assert first.images[0].data_or_path == png_bytes()
    assert isinstance(call, AssistantMessage) and call.content == "Checking."
    assert [(c.id, c.name, c.arguments) for c in call.tool_calls] == [("c1", "get_weather", {"city": "Paris"})]
    assert isinstance(result, ToolResult) and (result.tool_call_id, result.name, result.content) == ("c1", "get_weather", "Sunny.")
    assert [(c.id, c.name, c.arguments) for c in openai_call.tool_calls] == [("c2", "get_time", {})]
    assert second.name == "get_time"


def test_tool_results_are_rendered_back_in_both_views(llm):
    messages = [user("Weather in Paris?"),
                ChatMessage(role="assistant", blocks=[ToolCallBlock(tool_call_id="c1", tool_name="get_weather", tool_kwargs={"city": "Paris"})]),
                ChatMessage(role="tool", content="Sunny and 24 C.", additional_kwargs={"tool_call_id": "c1"})]
    views = llm.chat_core.context.render(to_core_messages(messages), tools=to_tool_specs([WEATHER]))
    for text in (views.full_text, views.comp_text):
        assert '"name": "get_weather", "arguments": {"city": "Paris"}' in text
        assert '<tool_response name="get_weather">\nSunny and 24 C.\n</tool_response>' in text


def test_unsupported_content_is_a_clear_error_not_a_silent_drop(llm):
    with pytest.raises(InvalidMessageError, match="VideoBlock"):
        llm.chat([ChatMessage(role="user", blocks=[VideoBlock(url="http://x/v.mp4")])])
    with pytest.raises(InvalidMessageError, match="matches no earlier tool call"):
        llm.chat([user("hi"), ChatMessage(role="tool", content="x", additional_kwargs={"tool_call_id": "nope"})])


def test_function_tools_become_tool_specs_with_their_json_schema():
    [spec] = to_tool_specs([WEATHER])
    assert spec.name == "get_weather" and spec.description == "Current weather of a city."  # no Python signature line
    assert spec.parameters["properties"]["city"]["type"] == "string" and spec.parameters["required"] == ["city"]


def test_a_description_the_user_wrote_is_kept_whole():
    written = FunctionTool.from_defaults(get_weather, description="get_weather(city) looks up the sky.\nCity names only.")
    assert to_tool_specs([written])[0].description == "get_weather(city) looks up the sky.\nCity names only."
    assert to_tool_specs([FunctionTool.from_defaults(get_time, description="The time.")])[0].description == "The time."
    assert to_tool_specs([FunctionTool.from_defaults(lambda: 1, name="one")])[0].description == ""  # only a signature


def test_a_tool_whose_schema_does_not_validate_is_rejected_with_its_name(llm):
    bad = {"type": "function", "function": {"name": "bad", "parameters": {"type": "object", "required": ["x"]}}}
    with pytest.raises(InvalidToolSchemaError, match="'bad'.*not in its properties"):
        llm.chat_with_tools([bad], user_msg="hi")
    with pytest.raises(InvalidInputError, match="pass a LlamaIndex tool"):
        llm.chat_with_tools([object()], user_msg="hi")
    with pytest.raises(InvalidToolSchemaError, match="A tool has no name"):  # a dict without one
        llm.chat_with_tools([{"type": "function", "function": {"description": "no name"}}], user_msg="hi")


def test_unknown_options_are_an_error_and_max_tokens_is_understood(llm):
    with pytest.raises(InvalidInputError, match="does not know the options \\['frequency_penalty'\\]"):
        llm.chat([user("hi")], frequency_penalty=0.5)
    response = llm.chat([user("hi")], max_tokens=5)
    assert response.raw["usage"]["completion_tokens"] <= 5 and response.additional_kwargs["finish_reason"] == "length"


# ---------------------------------------------------------------------------------------------------------------
# Tool calls: grammar-constrained, extracted from complete and streamed responses


def test_required_tool_call_gives_schema_valid_arguments_and_an_id(llm):
    response = llm.chat_with_tools([WEATHER, CLOCK], user_msg="Weather in Paris?", tool_required=True)
    calls = llm.get_tool_calls_from_response(response)
    assert len(calls) == 1 and calls[0].tool_name in {"get_weather", "get_time"}
    assert calls[0].tool_id.startswith("call_")
    if calls[0].tool_name == "get_weather":
        assert set(calls[0].tool_kwargs) == {"city"} and isinstance(calls[0].tool_kwargs["city"], str)
    else:
        assert calls[0].tool_kwargs == {}
    assert response.additional_kwargs["finish_reason"] == "tool_calls"


def test_a_named_tool_choice_calls_that_tool(llm):
    response = llm.chat_with_tools([WEATHER, CLOCK], user_msg="What time is it?", tool_choice="get_time")
    assert [c.tool_name for c in llm.get_tool_calls_from_response(response)] == ["get_time"]


def test_streamed_responses_carry_the_calls_completed_so_far_with_the_final_ids(llm):
    chunks = list(llm.stream_chat_with_tools([WEATHER, CLOCK], user_msg="Weather?", tool_required=True))
    final = chunks[-1]
    final_calls = llm.get_tool_calls_from_response(final)
    assert final_calls and "asymspec_stats" in final.additional_kwargs
    seen = [llm.get_tool_calls_from_response(c, error_on_no_tool_call=False) for c in chunks]
    assert seen[0] == [] or seen[0] == final_calls[:1]
    assert all(s == final_calls[: len(s)] for s in seen)  # calls only accumulate, same ids as the final reply
    assert "".join(c.delta or "" for c in chunks) == (final.message.content or "")


def test_a_call_cut_off_by_the_token_limit_is_an_invalid_call_not_a_crash(llm):
    response = llm.chat_with_tools([WEATHER], user_msg="Weather?", tool_required=True, max_new_tokens=12)
    invalid = response.additional_kwargs["invalid_tool_calls"]
    assert invalid and invalid[0]["error"] and response.additional_kwargs["finish_reason"] == "length"
    assert llm.get_tool_calls_from_response(response, error_on_no_tool_call=False) == []
    with pytest.raises(ValueError, match="malformed calls"):
        llm.get_tool_calls_from_response(response)


def test_single_call_mode_keeps_one_call(llm):
    response = llm.chat_with_tools([WEATHER, CLOCK], user_msg="Both please", tool_required=True,
                                   allow_parallel_tool_calls=False)
    assert len(llm.get_tool_calls_from_response(response)) == 1


# ---------------------------------------------------------------------------------------------------------------
# Usage and stats


def test_usage_is_reported_where_llama_index_reads_it(llm):
    messages = [user("Tell me about Paris.")]
    response = llm.chat(messages, max_new_tokens=10)
    usage = response.raw["usage"]
    assert get_tokens_from_response(response) == (usage["prompt_tokens"], usage["completion_tokens"])
    assert usage["prompt_tokens"] == llm.count_tokens(messages) and usage["completion_tokens"] == 10
    assert usage["total_tokens"] == usage["prompt_tokens"] + 10
    stats = response.additional_kwargs["asymspec_stats"]
    assert stats["new_tokens"] == 10 and stats["mode"] == "asymmetric" and stats["drafted"] > 0


def test_passages_reach_the_drafter_whole_and_the_verifier_compressed(llm):
    long = " ".join(f"Fact {i}: the river number {i} is {i * 7} km long." for i in range(80))
    message = ChatMessage(role="user", content="How long is river 42?",
                          additional_kwargs={"passages": [NodeWithScore(node=TextNode(text=long), score=1.0)]})
    response = llm.chat([message], max_new_tokens=4)
    usage = response.raw["usage"]
    assert usage["full_prompt_tokens"] > usage["prompt_tokens"] + 500
    passage = response.additional_kwargs["compression"]["by_kind"]["passage"]
    assert passage["compressed"] == 1 and passage["tokens_after"] < passage["tokens_before"]


def test_complete_and_stream_complete_agree(llm):
    done = llm.complete("Say something.", max_new_tokens=12)
    streamed = list(llm.stream_complete("Say something.", max_new_tokens=12))
    assert streamed[-1].text == done.text == "".join(r.delta or "" for r in streamed)
    assert done.raw["usage"]["completion_tokens"] == 12


# ---------------------------------------------------------------------------------------------------------------
# Async: the engine runs off the event loop


def test_achat_leaves_the_event_loop_free_while_decoding(llm):
    async def main():
        ticks = 0
        stop = False

        async def ticker():
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        started = time.perf_counter()
        response = await llm.achat([user("Write a long story.")], max_new_tokens=60)
        elapsed = time.perf_counter() - started
        stop = True
        await task
        return response, ticks, elapsed

    response, ticks, elapsed = asyncio.run(main())
    assert response.raw["usage"]["completion_tokens"] == 60
    assert ticks >= max(3, elapsed / 0.01)  # the loop kept running (~1 tick per ms; a blocked loop gives 1)


def test_cancelling_achat_stops_the_engine_between_blocks(llm):
    async def main():
        task = asyncio.create_task(llm.achat([user("Write a long story.")], max_new_tokens=3000))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    started = time.perf_counter()
    asyncio.run(main())
    assert time.perf_counter() - started < 3  # 3000 tokens take ~10 s
    assert llm.chat([user("hi")], max_new_tokens=3).raw["usage"]["completion_tokens"] == 3


def test_async_streams_match_the_sync_ones(llm):
    async def main():
        chat = [r async for r in await llm.astream_chat_with_tools([WEATHER], user_msg="Weather?", tool_required=True)]
        complete = [r async for r in await llm.astream_complete("Say something.", max_new_tokens=12)]
        return chat, complete, await llm.acomplete("Say something.", max_new_tokens=12)

    chat, complete, done = asyncio.run(main())
    sync_final = list(llm.stream_chat_with_tools([WEATHER], user_msg="Weather?", tool_required=True))[-1]
    def calls(response):  # ids are fresh per call
        return [(c.tool_name, c.tool_kwargs) for c in llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)]

    assert chat[-1].raw["raw_text"] == sync_final.raw["raw_text"] and calls(chat[-1]) == calls(sync_final)
    assert chat[-1].additional_kwargs["invalid_tool_calls"] == sync_final.additional_kwargs["invalid_tool_calls"]
    assert complete[-1].text == done.text


def test_closing_an_async_stream_early_releases_the_engine(llm):
    async def main():
        stream = await llm.astream_chat([user("Write a long story.")], max_new_tokens=80)
        async for _ in stream:
            break
        await stream.aclose()

    asyncio.run(main())
    deadline = time.monotonic() + 5
    while llm.engine.pool.stats.busy and time.monotonic() < deadline:
        time.sleep(0.05)
    assert llm.engine.pool.stats.busy == 0  # the worker closed the engine's generator: its cache set is free
    assert llm.chat([user("hi")], max_new_tokens=3).raw["usage"]["completion_tokens"] == 3


# ---------------------------------------------------------------------------------------------------------------
# Query engine


def test_query_engine_hands_nodes_over_as_passages(llm):
    facts = [" ".join(f"Note {j} of doc {i}: value {i * j}." for j in range(25)) for i in range(3)]
    index = SummaryIndex.from_documents([Document(text=t, metadata={"title": f"doc{i}"}) for i, t in enumerate(facts)])
    engine = AsymSpecQueryEngine.from_index(index, llm=llm)
    response = engine.query("What is note 5 of doc 2?")
    assert len(response.source_nodes) == 3
    meta = response.metadata
    assert meta["full_prompt_tokens"] > meta["prompt_tokens"] and meta["compression"]["by_kind"]["passage"]["items"] == 3
    assert meta["asymspec_stats"]["new_tokens"] == meta["completion_tokens"] > 0
    messages = engine.messages("q", response.source_nodes)
    full = llm.chat_core.context.render(to_core_messages(messages)).full_text
    assert all(t in full for t in facts) and 'source="doc2"' in full


def test_query_engine_streams_and_fills_metadata_when_drained(llm):
    index = SummaryIndex.from_documents([Document(text="The sky is blue.")])
    engine = AsymSpecQueryEngine.from_index(index, llm=llm, streaming=True)
    response = engine.query("What colour is the sky?")
    text = "".join(response.response_gen)
    assert response.metadata["completion_tokens"] > 0 and len(text) > 0

    async def aquery():
        streamed = await engine.aquery("What colour is the sky?")
        return "".join([t async for t in streamed.async_response_gen()]), streamed.metadata

    async_text, async_metadata = asyncio.run(aquery())
    assert async_text == text and async_metadata["completion_tokens"] == response.metadata["completion_tokens"]


def test_query_engine_needs_an_asymspec_llm():
    from llama_index.core.llms import MockLLM

    with pytest.raises(TypeError, match="needs an AsymSpecLLM"):
        AsymSpecQueryEngine.from_index(SummaryIndex.from_documents([Document(text="x")]), llm=MockLLM())


# ---------------------------------------------------------------------------------------------------------------
# ReAct steps


def test_for_react_replies_are_grammar_valid_react_steps(llm):
    from llama_index.core.agent.react.output_parser import ReActOutputParser
    from llama_index.core.agent.react.types import ActionReasoningStep

    short_city = {"name": "get_weather", "description": "Current weather of a city.", "parameters": {  # a random model
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"]}}  # rambles
    react = llm.for_react([short_city, CLOCK])
    assert react.chat_core is llm.chat_core and llm._react_tools is None  # the original stays a plain LLM
    messages = [ChatMessage(role="system", content="Tools: get_weather, get_time."), user("Weather in Paris?")]
    free = react.chat(messages, max_new_tokens=1000).message.content  # a random model may ramble in its answer
    assert free.startswith("Thought: ") and free.split("\n", 1)[1].startswith(("Action: ", "Answer: "))
    for choice, names in (("required", {"get_weather", "get_time"}), ("get_weather", {"get_weather"})):
        response = react.chat(messages, tool_choice=choice, max_new_tokens=1000)
        assert response.additional_kwargs["finish_reason"] == "stop", (choice, response.raw)  # the grammar ends after the Action Input
        step = ReActOutputParser().parse(response.message.content)
        assert isinstance(step, ActionReasoningStep) and step.action in names
        assert set(step.action_input) == ({"city"} if step.action == "get_weather" else set())
        assert not llm.get_tool_calls_from_response(response, error_on_no_tool_call=False)  # plain text, not calls


def test_react_views_carry_no_tools_block(llm):
    react = llm.for_react([WEATHER])
    assert react.count_tokens([user("hi")]) == llm.count_tokens([user("hi")]) < llm.count_tokens([user("hi")], [WEATHER])


# ---------------------------------------------------------------------------------------------------------------
# A FunctionAgent loop on the tiny pair (the bundled-model tests run the streaming path on real tools)


def test_function_agent_runs_a_forced_call_and_renders_its_result_back(llm):
    from llama_index.core.agent.workflow import AgentInput, FunctionAgent, ToolCallResult

    from pydantic import BaseModel, Field

    class City(BaseModel):
        city: str = Field(max_length=8)  # a short string: the random model rambles otherwise

    weather = FunctionTool.from_defaults(get_weather, fn_schema=City)
    agent = FunctionAgent(tools=[weather], llm=llm, initial_tool_choice="get_weather", streaming=False)

    async def main():
        handler = agent.run("Weather in Paris?", max_iterations=3, early_stopping_method="generate")
        events = [event async for event in handler.stream_events()]
        return events, await handler

    events, output = asyncio.run(main())
    results = [e for e in events if isinstance(e, ToolCallResult)]
    assert results and results[0].tool_name == "get_weather" and set(results[0].tool_kwargs) == {"city"}
    assert results[0].tool_output.content == f"Sunny in {results[0].tool_kwargs['city']}."
    second_input = [e.input for e in events if isinstance(e, AgentInput)][1]
    assert any(m.role == "tool" and m.additional_kwargs["tool_call_id"] == results[0].tool_id
               and m.content == results[0].tool_output.content for m in second_input)
    assert output.raw["usage"]["completion_tokens"] > 0


def test_decision_policy_is_a_setting_and_reaches_the_engine():
    from asymspec_agents import DecisionPolicy
    from llama_index.core.llms import ChatMessage

    pair = tiny_random_pair(seed=0, same=True)
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    llm = AsymSpecLLM(engine=engine, max_new_tokens=40, decisions=DecisionPolicy(triggers=(r"[A-Z]$",)))
    stats = llm.chat([ChatMessage(role="user", content="Hello")]).additional_kwargs["asymspec_stats"]
    assert stats["decision_points"] > 0 and stats["decision_points_at_slot0"] == stats["decision_points"]
    off = AsymSpecLLM(engine=engine, max_new_tokens=40, decisions=None)
    assert off.chat([ChatMessage(role="user", content="Hello")]).additional_kwargs["asymspec_stats"]["decision_points"] == 0


def test_concurrent_tasks_and_threads_on_one_llm_equal_their_serial_calls(llm):
    prompts = [f"Conversation {i}: tell me about topic number {i}." for i in range(4)]
    serial = [llm.chat([user(p)], max_new_tokens=16).message.content for p in prompts]

    async def gathered():
        return await asyncio.gather(*(llm.achat([user(p)], max_new_tokens=16) for p in prompts))

    assert [r.message.content for r in asyncio.run(gathered())] == serial
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda p: llm.chat([user(p)], max_new_tokens=16).message.content, prompts))
    assert threaded == serial
