from hypothesis import given
from hypothesis import strategies as st

from asymspec_agents.context import parse_tool_calls
from asymspec_agents.context.tool_format import format_assistant, format_tool_call


def test_a_rendered_call_parses_back_to_the_same_name_and_arguments():
    text = format_assistant("Let me check.", [("get_weather", {"city": "Oslo", "days": 2})])
    parsed = parse_tool_calls(text)
    assert parsed.text == "Let me check."
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("get_weather", {"city": "Oslo", "days": 2})]
    assert parsed.invalid_tool_calls == []


def test_raw_control_characters_in_a_string_which_the_tool_grammar_allows_still_parse():
    parsed = parse_tool_calls('<tool_call>\n{"name": "search", "arguments": {"q": "a\x1eb"}}\n</tool_call>')
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("search", {"q": "a\x1eb"})]


def test_several_calls_come_back_in_order():
    text = format_tool_call("a", {}) + "\n" + format_tool_call("b", {"x": [1, 2]})
    assert [c.name for c in parse_tool_calls(text).tool_calls] == ["a", "b"]


def test_a_call_whose_closing_tag_was_cut_by_a_stop_string_still_parses():
    parsed = parse_tool_calls('<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n')
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("search", {"q": "x"})]


def test_malformed_json_becomes_an_invalid_call_with_the_name_it_could_read():
    parsed = parse_tool_calls('<tool_call>{"name": "search", "arguments": {"q": </tool_call>')
    assert parsed.tool_calls == []
    [bad] = parsed.invalid_tool_calls
    assert bad.name == "search" and "not valid JSON" in bad.error and bad.raw.startswith('{"name"')


def test_calls_without_a_name_or_with_non_object_arguments_are_invalid():
    parsed = parse_tool_calls('<tool_call>{"arguments": {}}</tool_call><tool_call>{"name": "f", "arguments": [1]}</tool_call>'
                              "<tool_call>[1, 2]</tool_call>")
    errors = [bad.error for bad in parsed.invalid_tool_calls]
    assert len(errors) == 3
    assert 'missing "name"' in errors[0] and "must be a JSON object" in errors[1] and "expected a JSON object" in errors[2]


def test_arguments_given_as_a_json_string_are_decoded():
    [call] = parse_tool_calls('<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>').tool_calls
    assert call.arguments == {"a": 1}


def test_text_without_calls_is_returned_whole():
    parsed = parse_tool_calls("Final answer: 42")
    assert parsed.text == "Final answer: 42" and parsed.tool_calls == [] and parsed.invalid_tool_calls == []


@given(st.text(max_size=200))
def test_parsing_never_raises(text):
    parse_tool_calls(text)
    parse_tool_calls("<tool_call>" + text)


def test_a_complete_call_whose_closing_tag_was_cut_off_still_parses():
    from asymspec_agents.context.tool_format import parse_tool_calls

    for cut in ("\n</", "\n</tool_c", "\n"):
        parsed = parse_tool_calls('<tool_call>\n{"name": "calc", "arguments": {"x": 1}}' + cut)
        assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("calc", {"x": 1})] and not parsed.invalid_tool_calls
    assert parse_tool_calls('<tool_call>\n{"name": "calc", "arguments": {"x": ').invalid_tool_calls
