import pytest

from asymspec_agents.context import AssistantMessage, DualContext, Passage, SystemMessage, ToolCall, ToolResult, UserMessage
from asymspec_agents.context.messages import validate_conversation
from asymspec_agents.errors import InvalidInputError, InvalidMessageError


def test_empty_conversation_is_rejected_with_a_hint(tok):
    with pytest.raises(InvalidMessageError, match="at least one message"):
        DualContext(tok).render([])


def test_unknown_role_names_the_valid_roles():
    with pytest.raises(InvalidMessageError, match="unknown role 'narrator'.*system, user, assistant, tool"):
        validate_conversation([{"role": "narrator", "content": "once upon a time"}])


def test_non_message_objects_are_rejected():
    with pytest.raises(InvalidMessageError, match="Message 0 is a str"):
        validate_conversation(["hello"])


def test_tool_call_without_id_is_rejected():
    with pytest.raises(InvalidMessageError, match="has no id"):
        validate_conversation([UserMessage("hi"), AssistantMessage("", tool_calls=[ToolCall("", "search", {})])])


def test_duplicate_tool_call_ids_are_rejected():
    calls = [ToolCall("c1", "a", {}), ToolCall("c1", "b", {})]
    with pytest.raises(InvalidMessageError, match="used twice"):
        validate_conversation([UserMessage("hi"), AssistantMessage("", tool_calls=calls)])


def test_tool_result_with_unknown_call_id_is_rejected():
    messages = [UserMessage("hi"), AssistantMessage("", tool_calls=[ToolCall("c1", "search", {})]), ToolResult("c9", "search", "x")]
    with pytest.raises(InvalidMessageError, match="'c9', which matches no earlier tool call.*c1"):
        validate_conversation(messages)


def test_tool_result_before_its_call_is_rejected():
    messages = [UserMessage("hi"), ToolResult("c1", "search", "x"), AssistantMessage("", tool_calls=[ToolCall("c1", "search", {})])]
    with pytest.raises(InvalidMessageError, match="matches no earlier tool call"):
        validate_conversation(messages)


def test_non_string_content_is_rejected():
    with pytest.raises(InvalidMessageError, match="content must be a string"):
        validate_conversation([UserMessage(["a", "list"])])


def test_passages_without_text_are_rejected():
    with pytest.raises(InvalidMessageError, match="passages must be Passage objects with text strings"):
        validate_conversation([UserMessage("q", passages=["raw string"])])
    with pytest.raises(InvalidMessageError, match="passages must be Passage objects"):
        validate_conversation([UserMessage("q", passages=[Passage(None)])])


def test_errors_are_the_projects_input_errors():
    assert issubclass(InvalidMessageError, InvalidInputError)


def test_openai_style_dicts_are_coerced():
    messages = validate_conversation([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "cold"},
    ])
    assert isinstance(messages[0], SystemMessage)
    assert messages[2].content == "" and messages[2].tool_calls == [ToolCall("c1", "get_weather", {"city": "Oslo"})]
    assert messages[3] == ToolResult("c1", "get_weather", "cold")


def test_tool_call_arguments_given_as_bad_json_are_rejected():
    with pytest.raises(InvalidMessageError, match="not valid JSON"):
        ToolCall("c1", "search", "{not json")


def test_assistant_content_none_is_not_mutated_in_place():
    message = AssistantMessage(None, tool_calls=[ToolCall("c1", "f", {})])
    out = validate_conversation([UserMessage("hi"), message])
    assert out[1].content == "" and message.content is None
