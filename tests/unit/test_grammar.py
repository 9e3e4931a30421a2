"""Tool-call and structured-output grammars: what each tool_choice admits and refuses."""

import pytest

from asymspec_agents import InvalidInputError
from asymspec_agents.context import ToolSpec
from asymspec_agents.context.tool_format import format_tool_call
from asymspec_agents.grammar import GrammarBuilder
from asymspec_agents.testing import byte_tokenizer

TOOLS = [
    ToolSpec("get_weather", parameters={"type": "object", "properties": {"city": {"type": "string"}},
                                        "required": ["city"]}),
    ToolSpec("no_args"),
]
WEATHER = format_tool_call("get_weather", {"city": "Paris"})
NO_ARGS = format_tool_call("no_args", {})


@pytest.fixture(scope="module")
def tokenizer():
    return byte_tokenizer()


@pytest.fixture(scope="module")
def builder(tokenizer):
    return GrammarBuilder(tokenizer)


def admits(constraint, tokenizer, text: str) -> bool:
    """Whether the grammar lets the whole text through and then allows end of sequence."""
    for token in tokenizer(text, add_special_tokens=False)["input_ids"]:
        if not constraint.allowed()[token]:
            return False
        constraint.accept(token)
    return bool(constraint.allowed()[tokenizer.eos_token_id])


@pytest.mark.parametrize("text, expected", [
    ("Just an answer.", True),
    ("Let me look.\n" + WEATHER, True),
    (WEATHER + "\n" + NO_ARGS, True),
    (WEATHER + "\nand some chatter", False),
    (WEATHER.replace('"city"', '"town"'), False),
    (WEATHER.replace("get_weather", "unknown_tool"), False),
])
def test_auto_choice_keeps_text_free_and_constrains_calls(builder, tokenizer, text, expected):
    assert admits(builder.tool_calls(TOOLS, "auto"), tokenizer, text) is expected


@pytest.mark.parametrize("choice, text, expected", [
    ("required", "Just an answer.", False),
    ("required", WEATHER, True),
    ("any", NO_ARGS + "\n" + WEATHER, True),
    ("no_args", WEATHER, False),
    ("no_args", NO_ARGS, True),
])
def test_forcing_choices_admit_only_calls(builder, tokenizer, choice, text, expected):
    assert admits(builder.tool_calls(TOOLS, choice), tokenizer, text) is expected


def test_parallel_false_admits_a_single_call(builder, tokenizer):
    assert admits(builder.tool_calls(TOOLS, "required", parallel=False), tokenizer, WEATHER)
    assert not admits(builder.tool_calls(TOOLS, "required", parallel=False), tokenizer, WEATHER + "\n" + NO_ARGS)


@pytest.mark.parametrize("text, expected", [
    ("Just an answer, x < y.", True),
    ("Let me look.\n" + WEATHER, False),
    ("<tool_call call>", False),  # a mangled tag is an unparsable call, never an answer
    ("<tool_call", False),
    ("</tool_call>", False),
    ("Calls like tool_call() are fine.", True),
])
def test_choice_none_admits_text_but_no_call(builder, tokenizer, text, expected):
    assert admits(builder.tool_calls(TOOLS, "none"), tokenizer, text) is expected


def test_no_tools_means_no_grammar(builder):
    assert builder.tool_calls([], "auto") is None


def test_unknown_tool_choice_names_the_bound_tools(builder):
    with pytest.raises(InvalidInputError, match="get_weather, no_args"):
        builder.tool_calls(TOOLS, "search")


def test_json_schema_grammar_admits_only_matching_values(builder, tokenizer):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert admits(builder.json_schema(schema), tokenizer, '{"n": 3}')
    assert not admits(builder.json_schema(schema), tokenizer, '{"n": "three"}')


def test_an_invalid_schema_is_an_input_error(builder):
    with pytest.raises(InvalidInputError, match="schema"):
        builder.json_schema({"type": "object", "properties": {"n": {"type": "no-such-type"}}})
