"""The pure converters between LangChain messages and the core's message model."""

import base64
import json

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, ChatMessage, FunctionMessage, HumanMessage, SystemMessage, ToolMessage

from asymspec_agents.context import AssistantMessage, ToolResult, UserMessage
from asymspec_agents.context import SystemMessage as CoreSystem
from asymspec_agents.context.tool_format import InvalidToolCall, ParsedToolCall
from asymspec_agents.errors import InvalidInputError, InvalidToolSchemaError
from asymspec_agents.testing import png_bytes
from langchain_asymspec.messages import (content_text, format_instruction, to_core_messages, to_tool_choice,
                                         to_openai_tools, to_tool_specs, tool_call_chunk_of,
                                         with_format_instruction)

ADDER = {"type": "function", "function": {"name": "add", "description": "Add.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}


def test_a_tool_history_converts_call_ids_names_and_error_status():
    messages = [SystemMessage("Be brief."), HumanMessage("What is 1 + 2"),
                AIMessage("", tool_calls=[{"name": "add", "args": {"a": 1}, "id": "abc", "type": "tool_call"}]),
                ToolMessage("Error: missing b", tool_call_id="abc", status="error")]
    system, user, assistant, result = to_core_messages(messages)
    assert system == CoreSystem("Be brief.") and user == UserMessage("What is 1 + 2")
    assert isinstance(assistant, AssistantMessage) and assistant.tool_calls[0].id == "abc"
    assert assistant.tool_calls[0].arguments == {"a": 1}
    assert result == ToolResult("abc", "add", "Error: missing b", is_error=True)  # name taken from the call


def test_list_content_keeps_text_blocks_and_drops_blocks_that_repeat_tool_calls():
    ai = AIMessage([{"type": "text", "text": "some text"}, {"type": "tool_use", "id": "x", "name": "add", "input": {}}],
                   tool_calls=[{"name": "add", "args": {}, "id": "x", "type": "tool_call"}])
    [_, assistant] = to_core_messages([HumanMessage([{"type": "text", "text": "hi"}]), ai])
    assert assistant.content == "some text" and [c.name for c in assistant.tool_calls] == ["add"]


def test_media_other_than_images_is_an_input_error_that_says_text_only():
    audio = HumanMessage([{"type": "text", "text": "Transcribe"}, {"type": "audio", "base64": "AAAA",
                                                                   "mime_type": "audio/wav"}])
    with pytest.raises(InvalidInputError, match="text only"):
        to_core_messages([audio])


PNG = base64.b64encode(png_bytes()).decode()


@pytest.mark.parametrize("block", [
    {"type": "image", "base64": PNG, "mime_type": "image/png"},  # LangChain's v1 standard block
    {"type": "image", "source_type": "base64", "data": PNG, "mime_type": "image/png"},  # its v0.3 block
    {"type": "image", "url": f"data:image/png;base64,{PNG}"},
    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},  # OpenAI's
])
def test_image_blocks_in_human_and_tool_messages_become_images(block):
    call = {"name": "screenshot", "args": {}, "id": "c1", "type": "tool_call"}
    human, _, tool = to_core_messages([HumanMessage([{"type": "text", "text": "Look"}, block]),
                                       AIMessage("", tool_calls=[call]),
                                       ToolMessage([block, "Saved."], tool_call_id="c1")])
    assert human.content == "Look" and [i.data_or_path for i in human.images] == [png_bytes()]
    assert tool.content == "Saved." and [i.data_or_path for i in tool.images] == [png_bytes()]


@pytest.mark.parametrize("message, says", [
    (HumanMessage([{"type": "image", "url": "https://example.com/cat.png"}]), "nothing here fetches images"),
    (HumanMessage([{"type": "image", "file_id": "file-1"}]), "needs base64 data"),
    (HumanMessage([{"type": "image", "base64": "%%%", "mime_type": "image/png"}]), "not valid base64"),
    (SystemMessage([{"type": "image", "base64": PNG}]), "images go in HumanMessage and ToolMessage"),
])
def test_remote_malformed_or_misplaced_images_are_input_errors(message, says):
    with pytest.raises(InvalidInputError, match=says):
        to_core_messages([message])


def test_chat_messages_map_by_role_and_unknown_kinds_are_rejected():
    assert to_core_messages([ChatMessage(role="user", content="hi")]) == [UserMessage("hi")]
    with pytest.raises(InvalidInputError, match="FunctionMessage"):
        to_core_messages([FunctionMessage(name="f", content="1")])


def test_content_text_joins_strings_and_text_blocks():
    assert content_text(["a", {"type": "text", "text": "b"}], 0) == "a\nb"


@pytest.mark.parametrize("choice, expected", [(None, None), ("auto", "auto"), ("any", "any"), ("required", "required"),
                                              ("none", "none"), ("add", "add"), (True, "add"), (False, "none"),
                                              ({"type": "function", "function": {"name": "add"}}, "add")])
def test_tool_choice_conventions_map_to_the_core(choice, expected):
    assert to_tool_choice(choice, [ADDER]) == expected


def test_tools_of_every_langchain_kind_become_openai_functions_and_tool_specs():
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    [function] = to_openai_tools([add])
    assert function["function"]["name"] == "add" and function["function"]["parameters"]["required"] == ["a", "b"]
    [spec] = to_tool_specs([add])
    assert (spec.name, spec.description, spec.parameters) == ("add", "Add two integers.",
                                                             function["function"]["parameters"])


@pytest.mark.parametrize("tool", [{"type": "function", "function": {"description": "no name"}},
                                  {"description": "no name", "parameters": {}},
                                  {"type": "function", "function": {"name": "has space", "parameters": {}}}])
def test_a_malformed_tool_dict_gets_the_projects_own_error(tool):
    with pytest.raises(InvalidToolSchemaError, match="[Tt]ool"):
        to_tool_specs([tool])


def test_a_valid_call_chunk_merges_into_the_same_tool_call():
    call = ParsedToolCall("add", {"a": 1, "b": 2}, raw="", id="call_1")
    merged = AIMessageChunk(content="") + tool_call_chunk_of(call, 0)
    assert merged.tool_calls == [{"name": "add", "args": {"a": 1, "b": 2}, "id": "call_1", "type": "tool_call"}]


def test_a_cut_off_call_stays_invalid_after_langchain_merges_chunks():
    # LangChain parses chunk args leniently: a raw '{"a": 1' alone would become a valid call with partial args.
    call = InvalidToolCall("add", '{"name": "add", "arguments": {"a": 1', "not valid JSON: Expecting ',' delimiter")
    merged = AIMessageChunk(content="") + tool_call_chunk_of(call, 0)
    assert merged.tool_calls == [] and merged.invalid_tool_calls[0]["name"] == "add"
    assert '{"a": 1' in merged.invalid_tool_calls[0]["args"]


def test_format_instruction_names_fields_types_and_descriptions():
    schema = {"type": "object", "properties": {"setup": {"type": "string", "description": "the question"},
                                               "n": {"type": "integer"}}, "required": ["setup"]}
    text = format_instruction(schema)
    assert '"setup" (string): the question' in text and '"n" (integer, optional)' in text
    assert json.loads(format_instruction({"type": "array"}).split(": ", 1)[1]) == {"type": "array"}


def test_format_instruction_goes_into_the_last_user_turn_only():
    messages = [UserMessage("first"), AssistantMessage("ok"), UserMessage("second")]
    out = with_format_instruction(messages, {"type": "object", "properties": {"x": {"type": "string"}}})
    assert out[:2] == messages[:2] and out[2].content.startswith("second\n\n") and messages[2].content == "second"
    after_tool = with_format_instruction([UserMessage("q"), AssistantMessage("a")], {"type": "object"})
    assert isinstance(after_tool[-1], UserMessage) and len(after_tool) == 3
