"""Translation between LlamaIndex's types and the core's: chat messages, tools and retrieved nodes in; chat
responses (text, tool calls, usage, speculation stats) out."""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from llama_index.core.base.llms.types import (ChatMessage, ChatResponse, ImageBlock, MessageRole, TextBlock,
                                              ThinkingBlock, ToolCallBlock)

from asymspec_agents.chat import ChatReply
from asymspec_agents.context import (AssistantMessage, ImageItem, Passage, SystemMessage, ToolCall, ToolResult,
                                     ToolSpec, UserMessage)
from asymspec_agents.context.images import image_from_url
from asymspec_agents.context.messages import coerce_tool_call
from asymspec_agents.context.tool_format import ParsedToolCall
from asymspec_agents.errors import InvalidInputError, InvalidMessageError


# ---------------------------------------------------------------------------------------------------------------
# LlamaIndex -> core


def to_core_messages(messages: Sequence[ChatMessage]) -> list:
    """LlamaIndex chat messages as the core's message objects (validated later by the dual-view memory)."""
    out: list = []
    names: dict[str, str] = {}  # tool_call_id -> tool name, for tool messages that carry only the id
    for index, message in enumerate(messages):
        role = MessageRole(message.role) if not isinstance(message.role, MessageRole) else message.role
        if role not in (MessageRole.USER, MessageRole.TOOL, MessageRole.FUNCTION) and any(
                isinstance(block, ImageBlock) for block in message.blocks):
            raise InvalidMessageError(f"Message {index} ({role.value}) holds an image; images go in user and tool "
                                      "messages.")
        if role in (MessageRole.SYSTEM, MessageRole.DEVELOPER):
            out.append(SystemMessage(_text(message, index)))
        elif role == MessageRole.USER:
            out.append(UserMessage(_text(message, index), passages=to_passages(message.additional_kwargs.get("passages")),
                                   images=_images(message, index)))
        elif role in (MessageRole.ASSISTANT, MessageRole.CHATBOT, MessageRole.MODEL):
            calls = _tool_calls(message)
            names.update((call.id, call.name) for call in calls)
            out.append(AssistantMessage(_text(message, index), tool_calls=calls))
        elif role in (MessageRole.TOOL, MessageRole.FUNCTION):
            call_id = message.additional_kwargs.get("tool_call_id") or ""
            name = message.additional_kwargs.get("name") or names.get(call_id, "")
            out.append(ToolResult(call_id, name, _text(message, index), bool(message.additional_kwargs.get("is_error")),
                                  images=_images(message, index)))
        else:
            raise InvalidMessageError(f"Message {index} has role {role.value!r}, which AsymSpecLLM cannot render; use "
                                      "system, user, assistant or tool.")
    return out


def to_tool_specs(tools: Sequence[Any] | None) -> list[ToolSpec]:
    """LlamaIndex tools as the core's `ToolSpec`s (as LangChain's `to_tool_specs` gives them)."""
    return [_tool_spec(tool) for tool in tools or ()]


def _tool_spec(tool: Any) -> ToolSpec:
    """A LlamaIndex tool (anything with `.metadata: ToolMetadata`), a core ToolSpec, or an OpenAI-style dict."""
    if isinstance(tool, (ToolSpec, dict)):
        return tool if isinstance(tool, ToolSpec) else ToolSpec.from_dict(tool)
    metadata = getattr(tool, "metadata", None)
    if metadata is None or not hasattr(metadata, "get_parameters_dict"):
        raise InvalidInputError(f"A tool is a {type(tool).__name__}; pass a LlamaIndex tool (FunctionTool, "
                                "QueryEngineTool, ...), a ToolSpec or an OpenAI-style dict.")
    name = metadata.get_name()
    return ToolSpec(name, _without_signature(name, metadata.description or ""), metadata.get_parameters_dict())


def _without_signature(name: str, description: str) -> str:
    """The description without the Python signature `FunctionTool.from_defaults` puts on its first line
    ("name(query: typing.Annotated[str, FieldInfo(...)]) -> str"): both views render the tool's signature from its
    schema already, and a small model copies that line's text into its arguments."""
    first, _, rest = description.partition("\n")
    return rest.strip() if re.fullmatch(rf"{re.escape(name)}\(.*\)( -> .+)?", first) else description


def to_passages(items: Sequence[Any] | None) -> list[Passage]:
    """Retrieved nodes (NodeWithScore or BaseNode), dicts or Passages as the core's Passages."""
    passages = []
    for item in items or ():
        if isinstance(item, Passage):
            passages.append(item)
        elif isinstance(item, dict):
            passages.append(Passage(**item))
        elif hasattr(item, "node") and hasattr(item, "score"):  # NodeWithScore
            passages.append(_node_passage(item.node, item.score))
        elif hasattr(item, "get_content") and hasattr(item, "node_id"):  # BaseNode
            passages.append(_node_passage(item, None))
        else:
            raise InvalidMessageError(f"A passage is a {type(item).__name__}; pass NodeWithScore, a node, a dict or "
                                      "a Passage.")
    return passages


def _node_passage(node: Any, score: float | None) -> Passage:
    metadata = getattr(node, "metadata", {}) or {}
    source = next((str(metadata[key]) for key in ("source", "title", "file_name", "file_path") if metadata.get(key)), None)
    return Passage(node.get_content(), source=source, id=node.node_id, score=score)


def _text(message: ChatMessage, index: int) -> str:
    parts = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif not isinstance(block, (ToolCallBlock, ImageBlock, ThinkingBlock)):
            raise InvalidMessageError(f"Message {index} holds a {type(block).__name__}, which AsymSpecLLM cannot "
                                      "render; send text, images (user and tool turns) or tool calls (assistant "
                                      "turns).")
    return "\n".join(parts)


def _images(message: ChatMessage, index: int) -> list[ImageItem]:
    """A user or tool message's ImageBlocks as the core's ImageItems: bytes, a local path or a data URL (nothing is
    fetched: an http(s) URL is refused)."""
    images = []
    for block in (b for b in message.blocks if isinstance(b, ImageBlock)):
        where = f"Message {index}: image {len(images) + 1}"
        if block.url is not None:
            images.append(image_from_url(str(block.url), where))
        elif block.path is not None:
            images.append(ImageItem(block.path))
        elif block.image is not None:
            images.append(ImageItem(block.resolve_image().read()))  # LlamaIndex keeps it base64-encoded
        else:
            raise InvalidMessageError(f"{where}: an ImageBlock holds no image, path or url.")
    return images


def _tool_calls(message: ChatMessage) -> list[ToolCall]:
    calls = [ToolCall(block.tool_call_id or "", block.tool_name, tool_kwargs(block.tool_kwargs))
             for block in message.blocks if isinstance(block, ToolCallBlock)]
    if not calls:  # older integrations keep OpenAI-style dicts here
        for call in message.additional_kwargs.get("tool_calls") or []:
            calls.append(coerce_tool_call(call if isinstance(call, dict) else
                                          call.model_dump() if hasattr(call, "model_dump") else vars(call)))
    return calls


def tool_kwargs(kwargs: dict | str) -> dict:
    if isinstance(kwargs, dict):
        return kwargs
    try:
        value = json.loads(kwargs) if kwargs.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------------------------------------------------------
# core -> LlamaIndex


def to_chat_response(reply: ChatReply, delta: str | None = None) -> ChatResponse:
    """The final response: text and tool calls in the message, usage and speculation stats beside it."""
    usage = {"prompt_tokens": reply.usage.input_tokens, "completion_tokens": reply.usage.output_tokens,
             "total_tokens": reply.usage.total_tokens, "full_prompt_tokens": reply.usage.full_input_tokens}
    stats = reply.stats.to_dict()
    compression = reply.views.report.to_dict() if reply.views is not None else None
    invalid = [{"name": c.name, "raw": c.raw, "error": c.error} for c in reply.invalid_tool_calls]
    extra = {**usage, "asymspec_stats": stats, "compression": compression, "finish_reason": reply.finish_reason,
             "invalid_tool_calls": invalid}
    raw = {"usage": usage, "stats": stats, "finish_reason": reply.finish_reason, "raw_text": reply.raw_text}
    return ChatResponse(message=assistant_message(reply.text, reply.tool_calls), raw=raw, delta=delta,
                        additional_kwargs=extra)


def assistant_message(text: str, calls: list[ParsedToolCall]) -> ChatMessage:
    blocks: list = [TextBlock(text=text)] if text or not calls else []
    blocks += [ToolCallBlock(tool_call_id=c.id, tool_name=c.name, tool_kwargs=c.arguments) for c in calls]
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks)
