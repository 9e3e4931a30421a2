"""Small pure converters between LangChain messages and the core's message model and replies.

LangChain -> core: `to_core_messages`, `to_tool_specs` (`to_openai_tools`: the form `bind_tools` binds),
`to_tool_choice`.
core -> LangChain: `text_chunk`, `tool_call_chunk_of`, `final_chunk` (streaming is the one output path: the
invoke path merges these same chunks, so tool calls come out of `invoke` and `stream` identically).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import (AIMessage, AIMessageChunk, BaseMessage, ChatMessage, HumanMessage, SystemMessage,
                                     ToolMessage)
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.utils.function_calling import convert_to_openai_tool

from asymspec_agents.chat import ChatReply
from asymspec_agents.context import AssistantMessage, ImageItem, ToolCall, ToolResult, ToolSpec, UserMessage
from asymspec_agents.context.images import decode_base64, image_from_url
from asymspec_agents.context import SystemMessage as CoreSystemMessage
from asymspec_agents.context.messages import with_later_messages as core_with_later_messages
from asymspec_agents.context.tool_format import InvalidToolCall, ParsedToolCall
from asymspec_agents.context.tools import validate_tools
from asymspec_agents.errors import InvalidInputError, InvalidToolSchemaError

# content blocks that carry text; images (in human and tool messages) are read as stand-in text; other media
# (audio, video, files) this text-only pair cannot read
_TEXT_BLOCKS = {"text", "text-plain"}
_IMAGE_BLOCKS = {"image", "image_url"}
# blocks that repeat what `AIMessage.tool_calls` already holds, or hidden reasoning: not rendered
_SKIPPED_AI_BLOCKS = {"tool_use", "tool_call", "tool_call_chunk", "function_call", "thinking", "reasoning",
                      "redacted_thinking", "server_tool_call", "server_tool_result"}

ROLE_OF_CHAT_MESSAGE = {"system": "system", "developer": "system", "user": "user", "human": "user",
                        "assistant": "assistant", "ai": "assistant"}


# ---------------------------------------------------------------------------------------------------------------
# LangChain -> core


def to_core_messages(messages: Sequence[BaseMessage]) -> list:
    """LangChain messages as core messages. Images in human and tool messages (LangChain's standard image blocks
    with base64 data or a data URL, or OpenAI's `image_url` blocks) become the core's ImageItems. Raises
    `InvalidInputError` on other media, remote image URLs, malformed images or unknown message kinds."""
    out: list = []
    names: dict[str, str] = {}  # tool call id -> tool name, for ToolMessages sent without a name
    for index, message in enumerate(messages):
        if isinstance(message, SystemMessage):
            out.append(CoreSystemMessage(content_text(message.content, index)))
        elif isinstance(message, HumanMessage):
            text, images = content_parts(message.content, index, images=True)
            out.append(UserMessage(text, images=images))
        elif isinstance(message, AIMessage):
            calls = [ToolCall(call["id"] or f"call_{index}_{n}", call["name"], call["args"])
                     for n, call in enumerate(message.tool_calls)]
            names.update((call.id, call.name) for call in calls)
            out.append(AssistantMessage(content_text(message.content, index, skip=_SKIPPED_AI_BLOCKS), calls))
        elif isinstance(message, ToolMessage):
            name = message.name or names.get(message.tool_call_id, "")
            text, images = content_parts(message.content, index, images=True)
            out.append(ToolResult(message.tool_call_id, name, text, is_error=message.status == "error", images=images))
        elif isinstance(message, ChatMessage) and message.role in ROLE_OF_CHAT_MESSAGE:
            role = ROLE_OF_CHAT_MESSAGE[message.role]
            text = content_text(message.content, index)
            out.append({"system": CoreSystemMessage, "user": UserMessage, "assistant": AssistantMessage}[role](text))
        else:
            raise InvalidInputError(
                f"Message {index} is a {type(message).__name__}"
                + (f" with role {message.role!r}" if isinstance(message, ChatMessage) else "")
                + "; ChatAsymSpec takes SystemMessage, HumanMessage, AIMessage, ToolMessage and ChatMessage "
                f"(roles {', '.join(ROLE_OF_CHAT_MESSAGE)})."
            )
    return out


def content_text(content: str | list, index: int, skip: set[str] = frozenset()) -> str:
    """The text of a message's content: a string, or the text blocks of a list joined in order."""
    return content_parts(content, index, skip)[0]


def content_parts(content: str | list, index: int, skip: set[str] = frozenset(),
                  images: bool = False) -> tuple[str, list[ImageItem]]:
    """(the text blocks joined in order, the images) of a message's content; `images`: whether this kind of message
    may carry images."""
    if isinstance(content, str):
        return content, []
    parts, found = [], []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else type(block).__name__
        if isinstance(block, str):
            parts.append(block)
        elif kind in _TEXT_BLOCKS:
            parts.append(block.get("text", ""))
        elif kind in skip:
            continue
        elif kind in _IMAGE_BLOCKS and images:
            found.append(_image(block, f"Message {index}: image {len(found) + 1}"))
        elif kind in _IMAGE_BLOCKS:
            raise InvalidInputError(f"Message {index} holds an image; images go in HumanMessage and ToolMessage "
                                    "content.")
        else:
            raise InvalidInputError(
                f"Message {index} holds a {kind!r} content block; ChatAsymSpec's models read text only (and images "
                "as stand-in text). Send text blocks (describe PDFs, audio or video in words, e.g. with a "
                "transcription tool)."
            )
    return "\n".join(part for part in parts if part), found


def _image(block: dict, where: str) -> ImageItem:
    """An image block as the core's ImageItem: LangChain's standard blocks (`base64`, or `source_type` "base64"
    with `data`, or a data URL in `url`) and OpenAI's `image_url` blocks. Nothing is fetched."""
    if block["type"] == "image_url":
        url = block.get("image_url")
        return image_from_url(url.get("url") if isinstance(url, dict) else url, where)
    data = block.get("base64") or (block.get("data") if block.get("source_type") == "base64" else None)
    if data:
        return ImageItem(decode_base64(data, where))
    if block.get("url"):
        return image_from_url(block["url"], where)
    raise InvalidInputError(f"{where}: an image block needs base64 data or a data URL (file ids are not read "
                            "here).")


def to_tool_specs(tools: Sequence[Any]) -> list[ToolSpec]:
    """Any tools LangChain accepts as the core's `ToolSpec`s (as LlamaIndex's `to_tool_specs` gives them)."""
    return [ToolSpec.from_dict(tool) for tool in to_openai_tools(tools)]


def to_openai_tools(tools: Sequence[Any]) -> list[dict]:
    """Any tool LangChain accepts (BaseTool, function, Pydantic model, TypedDict, OpenAI or JSON-schema dict) as
    the OpenAI function form `{"type": "function", "function": {name, description, parameters}}` that `bind_tools`
    binds (LangChain's convention), checked by the core (a malformed tool raises `InvalidToolSchemaError` naming
    it, as the server answers 400)."""
    out = []
    for index, tool in enumerate(tools):
        try:
            out.append(convert_to_openai_tool(tool))
        except (KeyError, ValueError, TypeError) as exc:
            raise InvalidToolSchemaError(
                f"Tool {index} ({type(tool).__name__}) is not a tool LangChain can convert ({exc!r}); pass a BaseTool, "
                "a function, a Pydantic model, or a dict {'type': 'function', 'function': {'name': ..., "
                "'description': ..., 'parameters': {...}}}.") from None
        validate_tools(out[-1:])  # each on its own: binding a tool twice is LangChain's business, not an error
    return out


def to_tool_choice(tool_choice: Any, tools: Sequence[dict]) -> str | None:
    """LangChain's tool_choice conventions as the core's: None/"auto", "any"/"required", "none", or a tool name."""
    if tool_choice is None or tool_choice in ("auto", "any", "required", "none"):
        return tool_choice
    if tool_choice is True:
        if len(tools) != 1:
            raise InvalidInputError(f"tool_choice=True needs exactly one tool, got {len(tools)}; pass 'any' or a tool name.")
        return tools[0]["function"]["name"]
    if tool_choice is False:
        return "none"
    if isinstance(tool_choice, dict):  # {"type": "function", "function": {"name": ...}} or {"name": ...}
        name = tool_choice.get("function", tool_choice).get("name")
        if isinstance(name, str):
            return name
    if isinstance(tool_choice, str):
        return tool_choice
    raise InvalidInputError(f"tool_choice {tool_choice!r} is not understood; use 'auto', 'any', 'required', "
                            "'none', a tool name, or {'type': 'function', 'function': {'name': ...}}.")


def with_format_instruction(messages: list, schema: dict) -> list:
    """`messages` with the structured-output instruction appended to the last user turn (or as a new user turn).

    The grammar already forces the shape; the instruction tells the model what each field means, which small
    models need to fill them sensibly. Only this call's copy of the conversation changes."""
    instruction = format_instruction(schema)
    last = messages[-1] if messages else None
    if isinstance(last, UserMessage):
        return [*messages[:-1], UserMessage(f"{last.content}\n\n{instruction}", last.passages, last.images)]
    return [*messages, UserMessage(instruction)]


def format_instruction(schema: dict) -> str:
    properties = schema.get("properties") if schema.get("type", "object") == "object" else None
    if not properties:
        return f"Reply with only JSON matching this schema: {json.dumps(schema, ensure_ascii=False)}"
    required = set(schema.get("required") or ())
    lines = []
    for name, sub in properties.items():
        kind = _type_name(sub)
        optional = "" if name in required else ", optional"
        description = f": {sub['description']}" if isinstance(sub, dict) and sub.get("description") else ""
        lines.append(f'- "{name}" ({kind}{optional}){description}')
    return "Reply with only a JSON object with these fields:\n" + "\n".join(lines)


def _type_name(schema) -> str:
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_type_name(option) for option in schema[key])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    return kind or ("object" if "properties" in schema else "any")


# ---------------------------------------------------------------------------------------------------------------
# core -> LangChain


def text_chunk(text: str) -> AIMessageChunk:
    return AIMessageChunk(content=text)


def tool_call_chunk_of(call: ParsedToolCall | InvalidToolCall, index: int) -> AIMessageChunk:
    """One completed call as a chunk with one tool_call_chunk (complete arguments, so merging parses them once).

    An invalid call carries `error: raw text` as its args: LangChain derives a chunk's tool calls by parsing args
    leniently (a cut-off `{"a": 1` would parse), so args that start with the error text keep it invalid."""
    if isinstance(call, ParsedToolCall):
        chunk = tool_call_chunk(name=call.name, args=json.dumps(call.arguments, ensure_ascii=False), id=call.id,
                                index=index)
    else:
        chunk = tool_call_chunk(name=call.name, args=f"{call.error}: {call.raw}", id=f"invalid_{index}", index=index)
    return AIMessageChunk(content="", tool_call_chunks=[chunk])


def final_chunk(reply: ChatReply, model_name: str) -> AIMessageChunk:
    """The last chunk: usage (counted once), finish reason and the speculation stats."""
    usage = {"input_tokens": reply.usage.input_tokens, "output_tokens": reply.usage.output_tokens,
             "total_tokens": reply.usage.total_tokens}
    metadata = {"model_name": model_name, "model_provider": "asymspec", "finish_reason": reply.finish_reason,
                "asymspec": reply.summary()}
    return AIMessageChunk(content="", usage_metadata=usage, response_metadata=metadata, chunk_position="last")


def with_later_messages(full: list[BaseMessage], call: list[BaseMessage]) -> list[BaseMessage]:
    """`full_messages` completed for a call (core `with_later_messages`); LangChain messages match by id."""
    def same(a: BaseMessage, b: BaseMessage) -> bool:
        return a.id == b.id if a.id is not None and b.id is not None else a == b

    return core_with_later_messages(full, call, same)
