"""The one text format for tools, tool calls and tool results, used wherever a chat template has no tool support.

Renderers write it and output parsers read it; both import from here, so they cannot drift apart.
Hermes style (the format Qwen and Hermes models are trained on):

    system turn:   <system prompt>\n\n# Tools ... <tools>\n{one tool per line}\n</tools> ... (see `tools_block`)
    assistant:     <text>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
    tool turn:     <tool_response name="get_weather">\n<result text>\n</tool_response>
                   (with ` status="error"` in the tag when the tool failed)

An output parser finds calls with `TOOL_CALL_PATTERN` (also accepting a last call whose closing tag was cut off by a
stop string) and reads `{"name": str, "arguments": object}` inside; see `parse_tool_calls`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
# A complete call, or a final one left open (generation stopped at the closing tag or at end of sequence).
TOOL_CALL_PATTERN = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)

TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
)


@dataclass
class ParsedToolCall:
    name: str
    arguments: dict[str, Any]
    raw: str
    id: str | None = None  # model output carries no ids; integrations assign them


@dataclass
class InvalidToolCall:
    name: str | None
    raw: str
    error: str


@dataclass
class ParsedOutput:
    """Model output split into its text and its tool calls (valid and invalid, in order of appearance)."""

    text: str
    tool_calls: list[ParsedToolCall] = field(default_factory=list)
    invalid_tool_calls: list[InvalidToolCall] = field(default_factory=list)


def parse_tool_calls(text: str) -> ParsedOutput:
    """Split generated text into plain text and tool calls. Never raises: a malformed call becomes an
    `InvalidToolCall` (name if it could be read, the raw text, and what was wrong)."""
    calls: list[ParsedToolCall] = []
    invalid: list[InvalidToolCall] = []
    for match in TOOL_CALL_PATTERN.finditer(text):
        raw = match.group(1)
        if not match.group(0).endswith(TOOL_CALL_CLOSE):  # cut off by the token budget, maybe inside the tag
            raw = _without_partial_close(raw)
        record = _parse_one(raw)
        (calls if isinstance(record, ParsedToolCall) else invalid).append(record)
    remaining = TOOL_CALL_PATTERN.sub("", text).strip()
    return ParsedOutput(remaining, calls, invalid)


def _without_partial_close(raw: str) -> str:
    for n in range(min(len(TOOL_CALL_CLOSE) - 1, len(raw)), 0, -1):
        if raw.endswith(TOOL_CALL_CLOSE[:n]):
            return raw[:-n].rstrip()
    return raw


def format_tool_call(name: str, arguments: dict) -> str:
    return f'{TOOL_CALL_OPEN}\n{json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)}\n{TOOL_CALL_CLOSE}'


def format_assistant(content: str, calls: list[tuple[str, dict]]) -> str:
    """Assistant turn content: its text, then one tool-call block per call."""
    parts = [content] if content else []
    parts += [format_tool_call(name, arguments) for name, arguments in calls]
    return "\n".join(parts)


def format_tool_result(name: str, content: str, is_error: bool = False) -> str:
    return tool_result_open(name, is_error) + content + TOOL_RESULT_CLOSE


def tool_result_open(name: str, is_error: bool = False) -> str:
    status = ' status="error"' if is_error else ""
    return f'<tool_response name="{name}"{status}>\n'


TOOL_RESULT_CLOSE = "\n</tool_response>"


def tools_block(lines: list[str]) -> str:
    """The tools section of the system turn; `lines` are JSON schemas (full view) or signatures (compressed view)."""
    return TOOLS_HEADER + "\n".join(lines) + TOOLS_FOOTER


def _parse_one(raw: str) -> ParsedToolCall | InvalidToolCall:
    try:  # strict=False: raw control characters inside strings, which the tool grammar lets a model write
        payload = json.loads(raw, strict=False)
    except json.JSONDecodeError as exc:
        name = re.search(r'"name"\s*:\s*"([^"]*)"', raw)
        return InvalidToolCall(name.group(1) if name else None, raw, f"not valid JSON: {exc}")
    if not isinstance(payload, dict):
        return InvalidToolCall(None, raw, f"expected a JSON object, got {type(payload).__name__}")
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return InvalidToolCall(None, raw, 'missing "name" (a non-empty string)')
    arguments = payload.get("arguments", payload.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI style: arguments as a JSON string
        try:
            arguments = json.loads(arguments, strict=False) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return InvalidToolCall(name, raw, f"arguments string is not valid JSON: {exc}")
    if not isinstance(arguments, dict):
        return InvalidToolCall(name, raw, f'"arguments" must be a JSON object, got {type(arguments).__name__}')
    return ParsedToolCall(name, arguments, raw)
