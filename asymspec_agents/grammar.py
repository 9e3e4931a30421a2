"""Grammars for structured output and tool calls, compiled once per tokenizer and handed to the engine as
fresh `GrammarConstraint`s per call. Shared by every integration (LangChain, LlamaIndex).

Tool calls use the one text format of `context.tool_format`:
    <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
Free text stays free: with tool_choice "auto" the grammar only engages once the model writes `<tool_call>`,
and from there the tool name is restricted to the bound tools and the arguments to that tool's JSON schema.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from .context.tool_format import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from .context.tools import TOOL_CHOICES, ToolSpec, check_tool_choice
from .engine.constraints import GrammarConstraint
from .errors import InvalidInputError


class GrammarBuilder:
    """Compiles grammars for one tokenizer. Building its token table takes ~0.7 s for a 49k vocabulary, so
    keep one builder per tokenizer; compiled grammars are cached by their JSON text."""

    def __init__(self, tokenizer, vocab_size: int | None = None, max_rollback_tokens: int = 64):
        import xgrammar as xgr

        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size or len(tokenizer))
        self._compiler = xgr.GrammarCompiler(info)
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.max_rollback_tokens = max_rollback_tokens

    def json_schema(self, schema: dict) -> GrammarConstraint:
        """Output must be one JSON value of `schema` (then end of sequence)."""
        text = _dumps(schema, "structured-output schema")
        return self._constraint("schema:" + text, lambda: self._compiler.compile_json_schema(text, any_whitespace=False))

    def tool_calls(self, tools: Sequence[ToolSpec], choice: str | None = "auto",
                   parallel: bool = True) -> GrammarConstraint | None:
        """Grammar for replies that may (choice "auto"/None), must ("any"/"required"), must call one named tool
        (choice = its name), or must not call any ("none": free text without a tool-call tag, nor any mangled one
        such as `<tool_call call>`; the tools stay in the prompt, so an agent's answering step continues the cache of
        its calling steps)."""
        if not tools:
            return None
        if choice == "none":
            grammar = {"type": "any_text", "excludes": [TOOL_CALL_OPEN.rstrip(">"), TOOL_CALL_CLOSE.rstrip(">")]}
            text = _dumps({"type": "structural_tag", "format": grammar}, "tool schemas")
            return self._constraint("tools:" + text, lambda: self._compiler.compile_structural_tag(text))
        chosen = _chosen(tools, choice)
        tags = [{
            "type": "tag",
            "begin": f'{TOOL_CALL_OPEN}\n{{"name": {json.dumps(tool.name)}, "arguments": ',
            "content": {"type": "json_schema", "json_schema": _arguments_schema(tool), "max_whitespace_cnt": 1},
            "end": f"}}\n{TOOL_CALL_CLOSE}",
        } for tool in chosen]
        if choice in (None, "auto"):
            # free text until the first call; after it only more calls (one per line) or the end
            first = {"type": "triggered_tags", "triggers": [TOOL_CALL_OPEN], "tags": tags, "stop_after_first": True}
            more = {"type": "optional", "content": {"type": "sequence", "elements": [
                {"type": "const_string", "value": "\n"},
                {"type": "tags_with_separator", "tags": tags, "separator": "\n", "at_least_one": True}]}}
            grammar = {"type": "sequence", "elements": [first, more]} if parallel else first
        else:
            grammar = {"type": "tags_with_separator", "tags": tags, "separator": "\n", "at_least_one": True,
                       "stop_after_first": not parallel}
        text = _dumps({"type": "structural_tag", "format": grammar}, "tool schemas")
        return self._constraint("tools:" + text, lambda: self._compiler.compile_structural_tag(text))

    def react_steps(self, tools: Sequence[ToolSpec], choice: str | None = "auto") -> GrammarConstraint:
        """Grammar for one ReAct step (the text format of LlamaIndex's ReActAgent and of classic ReAct prompts):

            Thought: <one line, at most 200 characters>
            Action: NAME
            Action Input: {...JSON of NAME's schema...}
        or
            Thought: <one line>
            Answer: <free text>

        The tool name is one of `tools` and its input valid JSON of that tool's schema; the reply ends after it.
        `choice` as in `tool_calls`: "any"/"required" leave out the Answer branch, a tool name allows only it."""
        if not tools:
            raise InvalidInputError("A ReAct step grammar needs at least one tool.")
        tools = _chosen(tools, choice)
        actions = [{"type": "sequence", "elements": [
            {"type": "const_string", "value": f"Action: {tool.name}\nAction Input: "},
            {"type": "json_schema", "json_schema": _arguments_schema(tool), "max_whitespace_cnt": 1}]} for tool in tools]
        answer = {"type": "sequence", "elements": [{"type": "const_string", "value": "Answer: "}, {"type": "any_text"}]}
        grammar = {"type": "sequence", "elements": [
            {"type": "const_string", "value": "Thought: "}, {"type": "regex", "pattern": r"[^\n]{1,200}"},
            {"type": "const_string", "value": "\n"}, {"type": "or", "elements": actions + ([answer] if choice in (None, "auto") else [])}]}
        text = _dumps({"type": "structural_tag", "format": grammar}, "tool schemas")
        return self._constraint("react:" + text, lambda: self._compiler.compile_structural_tag(text))

    def _constraint(self, key: str, compile_grammar) -> GrammarConstraint:
        with self._lock:
            if key not in self._cache:
                try:
                    self._cache[key] = compile_grammar()
                except Exception as exc:  # xgrammar raises several types for unsupported schemas
                    raise InvalidInputError(f"Could not compile a grammar from the {key.split(':')[0]}: {exc}. "
                                            "Check that the JSON schema is valid.") from exc
            compiled = self._cache[key]
        return GrammarConstraint(compiled, self.max_rollback_tokens)


def _chosen(tools: Sequence[ToolSpec], choice: str | None) -> list[ToolSpec]:
    """The tools a tool_choice allows (checked against the bound names first)."""
    check_tool_choice(choice, [tool.name for tool in tools])
    return [tool for tool in tools if choice in TOOL_CHOICES or tool.name == choice]


def _arguments_schema(tool: ToolSpec) -> dict:
    return tool.parameters or {"type": "object", "properties": {}}


def _dumps(value, what: str) -> str:
    try:
        return json.dumps(value)  # not sort_keys: the grammar writes properties in the schema's order
    except TypeError as exc:
        raise InvalidInputError(f"The {what} must be JSON-serializable: {exc}") from exc
