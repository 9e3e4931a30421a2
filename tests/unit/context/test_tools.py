import json
import textwrap
from enum import Enum
from typing import Literal, Optional

import pytest
from pydantic import BaseModel, Field

from asymspec_agents.context import ToolSpec, signature, tool_spec_from_callable
from asymspec_agents.context.tools import first_sentence, validate_tools
from asymspec_agents.errors import InvalidInputError, InvalidToolSchemaError

# The function-calling example of OpenAI's API documentation.
OPENAI_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location. Returns a JSON object.",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location"],
        },
    },
}


def test_signature_shows_required_and_enum_arguments():
    spec = ToolSpec.from_dict(OPENAI_WEATHER)
    assert signature(spec) == (
        'get_current_weather(location: str, unit?: Literal["celsius", "fahrenheit"])  '
        "# Get the current weather in a given location."
    )


def test_signature_shows_defaults_as_json_and_return_type():
    spec = ToolSpec("search", "Search the web.\n\nLong details follow.", {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "max_results": {"type": "integer", "default": 5},
            "safe": {"type": "boolean", "default": True},
            "lang": {"type": ["string", "null"], "default": None},
        },
        "required": ["query"],
    }, returns="list[str]")
    assert signature(spec) == (
        "search(query: str, max_results: int = 5, safe: bool = true, lang: str | None = null) -> list[str]  # Search the web."
    )


def test_signature_of_a_no_argument_tool_has_empty_parentheses():
    assert signature(ToolSpec("get_time", "", {})) == "get_time()"
    assert signature(ToolSpec("get_time", "Current UTC time.", {"type": "object", "properties": {}})) == "get_time()  # Current UTC time."


def test_signature_renders_nested_objects_and_arrays():
    spec = ToolSpec("create_event", "Create a calendar event.", {
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "attendees": {"type": "array", "items": {"type": "object", "properties": {
                "email": {"type": "string"}, "optional": {"type": "boolean", "default": False}}, "required": ["email"]}},
            "when": {"type": "object", "properties": {"start": {"type": "string", "format": "date-time"},
                                                      "minutes": {"type": "integer"}}, "required": ["start"]},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["title", "when"],
    })
    assert signature(spec, description=False) == (
        "create_event(title: str, attendees?: list[{email: str, optional: bool = false}], "
        "when: {start: str, minutes?: int}, tags?: dict[str, str])"
    )


class Unit(str, Enum):
    celsius = "celsius"
    fahrenheit = "fahrenheit"


class Location(BaseModel):
    city: str
    country: Optional[str] = None


class WeatherQuery(BaseModel):
    """Look up a forecast. Uses the national weather service."""

    location: Location
    days: int = Field(3, description="How many days ahead")
    unit: Unit = Unit.celsius
    mode: Literal["summary", "hourly"] = "summary"


def test_signature_of_a_pydantic_generated_schema_uses_ref_names_and_anyof():
    # The schema LangChain/LlamaIndex produce for a pydantic args model: $defs, $ref, anyOf-with-null, titles.
    schema = WeatherQuery.model_json_schema()
    spec = ToolSpec("weather", WeatherQuery.__doc__, schema)
    validate_tools([spec])
    assert signature(spec) == (
        'weather(location: Location, days: int = 3, unit: Unit = "celsius", mode: Literal["summary", "hourly"] = "summary")'
        "  # Look up a forecast."
    )


def test_tool_spec_from_a_typed_callable_keeps_types_defaults_and_doc():
    def fetch(url: str, retries: int = 3, method: Literal["GET", "POST"] = "GET", headers: Optional[dict] = None,
              *args, **kwargs) -> bytes:
        """Fetch a URL. Follows redirects."""

    spec = tool_spec_from_callable(fetch)
    validate_tools([spec])
    assert signature(spec) == (
        'fetch(url: str, retries: int = 3, method: Literal["GET", "POST"] = "GET", headers: dict | None = null) -> bytes'
        "  # Fetch a URL."
    )


def test_tool_spec_from_a_stdlib_function_reads_its_signature_and_docstring():
    spec = tool_spec_from_callable(textwrap.shorten)
    assert spec.parameters["required"] == ["text", "width"]
    assert signature(spec).startswith("shorten(text: Any, width: Any)  # Collapse and truncate the given text")


def test_first_sentence_stops_at_the_first_full_stop_and_joins_lines():
    assert first_sentence("Return the sum\nof a and b. Raises on overflow.") == "Return the sum of a and b."


@pytest.mark.parametrize("parameters, message", [
    ({"type": "array"}, "type 'object'"),
    ({"type": "object", "properties": {"a": {"type": "str"}}}, "unknown type 'str'"),
    ({"type": "object", "properties": ["a"]}, "properties must be a dict"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "not in its properties"),
    ({"type": "object", "properties": {"a": {"enum": []}}}, "enum must be a non-empty list"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "strng"}}}}, "properties.a.items has unknown type"),
    ("not a schema", "must be a JSON schema dict"),
])
def test_invalid_tool_schemas_are_rejected_with_the_place_named(parameters, message):
    with pytest.raises(InvalidToolSchemaError, match=message):
        validate_tools([ToolSpec("t", "doc", parameters)])


def test_invalid_tool_names_and_duplicates_are_rejected():
    with pytest.raises(InvalidToolSchemaError, match="name 'bad name' is invalid"):
        validate_tools([ToolSpec("bad name")])
    with pytest.raises(InvalidToolSchemaError, match="Two tools are named 'a'"):
        validate_tools([ToolSpec("a"), ToolSpec("a")])
    assert issubclass(InvalidToolSchemaError, InvalidInputError)


def test_openai_dicts_round_trip_through_tool_spec():
    spec = ToolSpec.from_dict(OPENAI_WEATHER)
    assert json.loads(json.dumps(spec.to_dict())) == OPENAI_WEATHER
