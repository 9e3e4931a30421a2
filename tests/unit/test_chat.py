"""AsymSpecChat: rendering, constrained tool calls, parsing and streaming, on a tiny random pair."""

import json

import pytest

from asymspec_agents import AsymSpecEngine, GenerationConfig, InvalidInputError
from asymspec_agents.chat import AsymSpecChat, ToolCallSplitter
from asymspec_agents.context import ToolResult, ToolSpec, UserMessage, AssistantMessage, ToolCall
from asymspec_agents.testing import tiny_random_pair

WEATHER = ToolSpec("get_weather", "Current weather of a city.",
                   {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}}, "required": ["city"]})
CLOCK = ToolSpec("get_time", "The current time.", {"type": "object", "properties": {}})


@pytest.fixture(scope="module")
def chat():
    pair = tiny_random_pair(seed=0)
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    return AsymSpecChat(engine, config=GenerationConfig(max_new_tokens=80))


MESSAGES = [UserMessage("What is the weather in Paris?")]


def test_required_tool_choice_yields_parsed_calls_with_ids(chat):
    reply = chat.reply(MESSAGES, tools=[WEATHER, CLOCK], tool_choice="required", parallel_tool_calls=False)
    assert reply.finish_reason == "tool_calls"
    assert len(reply.tool_calls) == 1 and reply.tool_calls[0].name in {"get_weather", "get_time"}
    assert reply.tool_calls[0].id.startswith("call_") and reply.text == "" and not reply.invalid_tool_calls
    if reply.tool_calls[0].name == "get_weather":
        assert isinstance(reply.tool_calls[0].arguments["city"], str)


def test_a_named_tool_choice_calls_that_tool(chat):
    reply = chat.reply(MESSAGES, tools=[WEATHER, CLOCK], tool_choice="get_time", parallel_tool_calls=False)
    assert [c.name for c in reply.tool_calls] == ["get_time"] and reply.tool_calls[0].arguments == {}


def test_streamed_deltas_add_up_to_the_reply(chat):
    deltas = list(chat.stream(MESSAGES, tools=[WEATHER], tool_choice="required"))
    reply = deltas[-1].reply
    assert "".join(d.text for d in deltas) == reply.text
    streamed = [d.tool_call for d in deltas if d.tool_call is not None]
    assert streamed == reply.tool_calls + reply.invalid_tool_calls and streamed


def test_response_schema_gives_json_of_that_schema(chat):
    schema = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 99}},
              "required": ["answer"], "additionalProperties": False}
    reply = chat.reply(MESSAGES, response_schema=schema)
    assert isinstance(json.loads(reply.text, strict=False)["answer"], int)


def test_usage_counts_the_compressed_view_as_input(chat):
    long_result = "Sunny and warm. " * 200
    history = MESSAGES + [AssistantMessage("", tool_calls=[ToolCall("c1", "get_weather", {"city": "Paris"})]),
                          ToolResult("c1", "get_weather", long_result)]
    reply = chat.reply(history, tools=[WEATHER], max_new_tokens=5)
    assert reply.usage.full_input_tokens > reply.usage.input_tokens  # the tool output was compressed
    assert reply.usage.output_tokens == reply.stats.new_tokens
    assert reply.usage.input_tokens == reply.stats.prompt_tokens_comp == chat.count_tokens(history, [WEATHER])


def test_tool_choice_none_keeps_the_tools_in_view_and_parses_no_calls(chat):
    """As OpenAI's "none": the tools stay in the prompt (an agent's answering step then shares its calling steps'
    views and caches) and the grammar refuses a call (test_grammar)."""
    reply = chat.reply(MESSAGES, tools=[WEATHER], tool_choice="none", max_new_tokens=10)
    assert reply.tool_calls == [] and "get_weather" in reply.views.comp_text


def test_forcing_a_tool_without_tools_is_an_input_error(chat):
    with pytest.raises(InvalidInputError, match="needs bound tools"):
        chat.reply(MESSAGES, tool_choice="required")


@pytest.mark.parametrize("chunk_size", [1, 3, 1000])
def test_splitter_hides_markup_and_releases_each_call_once(chunk_size):
    text = ('Checking.\n<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
            '<tool_call>\n{"name": "b", "arguments": {}}\n</tool_call>')
    splitter = ToolCallSplitter()
    deltas = [d for i in range(0, len(text), chunk_size) for d in splitter.push(text[i:i + chunk_size])]
    deltas += splitter.finish()
    assert splitter.text == "Checking.\n"
    assert [d.tool_call.name for d in deltas if d.tool_call] == ["a", "b"]


@pytest.mark.parametrize("chunk_size", [1, 1000])
def test_splitter_drops_a_call_repeated_word_for_word_and_counts_it(chunk_size):
    call = '<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{}"}}}}\n</tool_call>\n'
    text = call.format("Paris") + call.format("Paris") + call.format("Rome")
    splitter = ToolCallSplitter()
    deltas = [d for i in range(0, len(text), chunk_size) for d in splitter.push(text[i:i + chunk_size])]
    deltas += splitter.finish()
    assert [d.tool_call.arguments["city"] for d in deltas if d.tool_call] == ["Paris", "Rome"]
    assert [c.arguments["city"] for c in splitter.calls] == ["Paris", "Rome"] and splitter.duplicates == 1


def test_splitter_turns_a_cut_off_call_into_an_invalid_call_and_keeps_lone_brackets_as_text():
    splitter = ToolCallSplitter()
    splitter.push('x < y <tool_call>\n{"name": "a", "argu')
    splitter.finish()
    assert splitter.text == "x < y " and splitter.invalid[0].name == "a" and not splitter.calls


def test_one_tool_choice_check_says_what_is_wrong():
    from asymspec_agents.context.tools import check_tool_choice

    check_tool_choice("auto", [])  # no error: free text needs no tools
    check_tool_choice("get_time", ["get_time"])
    with pytest.raises(InvalidInputError, match="needs bound tools"):
        check_tool_choice("required", [])
    with pytest.raises(InvalidInputError, match="names no bound tool; bound tools: a, b"):
        check_tool_choice("c", ["a", "b"])


def test_chats_are_shared_per_engine_and_policy():
    from asymspec_agents.context import CompressionPolicy

    pair = tiny_random_pair(seed=0)
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    assert AsymSpecChat.shared(engine) is AsymSpecChat.shared(engine)
    assert AsymSpecChat.shared(engine, CompressionPolicy(budgets={"user": 64})) is not AsymSpecChat.shared(engine)


def test_cli_bench_help_lists_the_benchmarks(capsys):
    from asymspec_agents import cli

    assert cli.main(["bench", "-h"]) == 0
    out = capsys.readouterr().out
    assert "throughput" in out and "accuracy" in out and max(len(line) for line in out.splitlines()) <= 80


def test_full_messages_give_the_drafter_the_conversation_before_the_callers_compression(chat):
    from asymspec_agents.context import SystemMessage

    full = [SystemMessage("Be brief."), UserMessage("A long note: " + "the fence is blue. " * 40), AssistantMessage("Noted."),
            UserMessage("What colour is the fence?")]
    comp = [SystemMessage("Be brief."), UserMessage("Summary: a note about a fence."), full[-1]]
    reply = chat.reply(comp, full_messages=full, max_new_tokens=4)
    views = chat.context.render_pair(full, comp)
    assert (reply.usage.full_input_tokens, reply.usage.input_tokens) == (len(views.full_ids), len(views.comp_ids))
    assert views.full_ids == chat.context.render(full).full_ids  # both rendered whole: no policy compression
    assert views.comp_ids == chat.context.render(comp).full_ids
    assert "the fence is blue" in views.full_text and "the fence is blue" not in views.comp_text


def test_with_later_messages_appends_what_the_call_added_after_the_shared_history():
    from asymspec_agents.context import SystemMessage
    from asymspec_agents.context.messages import with_later_messages

    system, a, b, c = SystemMessage("sys"), UserMessage("a"), AssistantMessage("b"), UserMessage("c")
    instruction = UserMessage("answer now")
    assert with_later_messages([a, b, c], [system, UserMessage("summary"), c, instruction]) == [system, a, b, c, instruction]
    assert with_later_messages([a, b], [UserMessage("unrelated")]) == [a, b]  # nothing shared: full alone


def test_past_the_window_a_conversation_goes_on_reports_its_cut_and_warns_once_per_conversation():
    import warnings

    from asymspec_agents.chat import WindowWarning

    pair = tiny_random_pair(seed=0, max_positions=512)  # bytes are tokens: a 512-byte window
    chat = AsymSpecChat(AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer),
                        config=GenerationConfig(max_new_tokens=4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        for opening in ("Read the pages.", "Read them again."):
            messages = [UserMessage(opening)]
            for step in range(6):
                call = ToolCall(f"c{step}", "read", {})
                messages += [AssistantMessage(tool_calls=[call]), ToolResult(call.id, "read", f"page {step} " * 20)]
                summary = chat.reply(messages).summary()
            assert summary["full_view_truncated_tokens"] > 0 and summary["full_input_tokens"] <= 512
    said = [str(w.message) for w in caught if issubclass(w.category, WindowWarning)]
    assert len(said) == 2 and "Read the pages." in said[0] and "Read them again." in said[1]
