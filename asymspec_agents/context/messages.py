"""Framework-neutral conversation items, and the boundary check every conversation passes before rendering.

Plain dataclasses: integrations translate their framework's messages into these. `validate_conversation` also
accepts OpenAI-style dicts (`{"role": "user", "content": ...}`), which is what most frameworks can emit.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Union

from ..errors import InvalidMessageError

ROLES = ("system", "user", "assistant", "tool")


def validate_conversation(messages) -> list[Message]:
    """Return `messages` as a list of message objects, or raise `InvalidMessageError` saying what is wrong.

    Checks: the conversation is not empty; every item is a message (or a dict with a known role); every tool call
    has a non-empty id, unique in the conversation; every tool result answers a call made earlier.
    """
    if messages is None or len(messages) == 0:
        raise InvalidMessageError("The conversation is empty; pass at least one message (e.g. a UserMessage).")
    out = [_coerce(message, index) for index, message in enumerate(messages)]
    call_ids: set[str] = set()
    for index, message in enumerate(out):
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                if not call.id:
                    raise InvalidMessageError(
                        f"Message {index}: tool call {call.name!r} has no id. Give every ToolCall a unique id "
                        "(frameworks send one, e.g. 'call_0'); tool results refer to calls by it."
                    )
                if call.id in call_ids:
                    raise InvalidMessageError(f"Message {index}: tool call id {call.id!r} is used twice; ids must be unique.")
                call_ids.add(call.id)
        elif isinstance(message, ToolResult) and message.tool_call_id not in call_ids:
            raise InvalidMessageError(
                f"Message {index}: tool result for {message.name!r} has tool_call_id {message.tool_call_id!r}, "
                f"which matches no earlier tool call (known ids: {sorted(call_ids) or 'none'}). A ToolResult must "
                "follow the AssistantMessage whose ToolCall has that id."
            )
    return out


@dataclass
class Passage:
    """A retrieved passage carried by a user message (RAG context)."""

    text: str
    source: str | None = None
    id: str | None = None
    score: float | None = None


@dataclass
class ImageItem:
    """An image carried by a user message: raw bytes or a path, with an optional caption."""

    data_or_path: bytes | str | Path
    caption: str | None = None


@dataclass
class ToolCall:
    """One call the assistant made; `arguments` is a dict (a JSON string is decoded)."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if isinstance(self.arguments, str):
            try:
                self.arguments = json.loads(self.arguments) if self.arguments.strip() else {}
            except json.JSONDecodeError as exc:
                raise InvalidMessageError(f"Tool call {self.name!r}: arguments are not valid JSON ({exc}); pass a dict.") from exc
        if not isinstance(self.arguments, dict):
            raise InvalidMessageError(f"Tool call {self.name!r}: arguments must be a dict, got {type(self.arguments).__name__}.")


@dataclass
class SystemMessage:
    content: str
    role: ClassVar[str] = "system"


@dataclass
class UserMessage:
    content: str
    passages: list[Passage] = field(default_factory=list)
    images: list[ImageItem] = field(default_factory=list)
    role: ClassVar[str] = "user"


@dataclass
class AssistantMessage:
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    role: ClassVar[str] = "assistant"


@dataclass
class ToolResult:
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    images: list[ImageItem] = field(default_factory=list)  # what a tool returned as pictures (a screenshot)
    role: ClassVar[str] = "tool"


Message = Union[SystemMessage, UserMessage, AssistantMessage, ToolResult]
MESSAGE_TYPES = (SystemMessage, UserMessage, AssistantMessage, ToolResult)


def _coerce(message, index: int) -> Message:
    if isinstance(message, MESSAGE_TYPES):
        return _check_text(message, index)
    if not isinstance(message, dict):
        raise InvalidMessageError(
            f"Message {index} is a {type(message).__name__}; pass SystemMessage, UserMessage, AssistantMessage, "
            "ToolResult or a dict with a 'role' key."
        )
    role = message.get("role")
    if role not in ROLES:
        raise InvalidMessageError(f"Message {index} has unknown role {role!r}; use one of {', '.join(ROLES)}.")
    content = message.get("content") or ""
    if role == "system":
        coerced = SystemMessage(content)
    elif role == "user":
        coerced = UserMessage(
            content,
            passages=[p if isinstance(p, Passage) else Passage(**p) for p in message.get("passages", [])],
            images=_images(message.get("images", []), index),
        )
    elif role == "assistant":
        coerced = AssistantMessage(content, tool_calls=[coerce_tool_call(call, index) for call in message.get("tool_calls") or []])
    else:
        coerced = ToolResult(message.get("tool_call_id") or "", message.get("name") or "", content,
                             bool(message.get("is_error", False)), _images(message.get("images", []), index))
    return _check_text(coerced, index)


def _images(images, index: int) -> list:
    """A message's images as ImageItems (dicts of ImageItem's fields taken); other items are left for
    `_check_text` to refuse."""
    if not isinstance(images, (list, tuple)):
        raise InvalidMessageError(f"Message {index}: images must be a list of ImageItem objects or dicts.")
    out = []
    for image in images:
        if isinstance(image, dict):
            try:
                image = ImageItem(**image)
            except TypeError:
                raise InvalidMessageError(f"Message {index}: an image dict takes 'data_or_path' and 'caption', got "
                                          f"{sorted(image)}.") from None
        out.append(image)
    return out


def coerce_tool_call(call, index: int = 0) -> ToolCall:
    """A ToolCall from itself or a dict (plain, or OpenAI's with name/arguments under "function")."""
    if isinstance(call, ToolCall):
        return call
    if not isinstance(call, dict):
        raise InvalidMessageError(f"Message {index}: a tool call is a {type(call).__name__}; pass ToolCall or a dict.")
    function = call.get("function", call)  # OpenAI nests name/arguments under "function"
    return ToolCall(call.get("id") or "", function.get("name") or "", function.get("arguments") or {})


def _check_text(message, index: int) -> Message:
    if message.content is None and isinstance(message, AssistantMessage):
        return replace(message, content="")  # frameworks send None for tool-call-only turns
    if not isinstance(message.content, str):
        raise InvalidMessageError(
            f"Message {index} ({message.role}) has content of type {type(message.content).__name__}; content must "
            "be a string (put retrieved text in `passages` and pictures in `images`)."
        )
    for passage in getattr(message, "passages", ()):
        if not isinstance(passage, Passage) or not isinstance(passage.text, str):
            raise InvalidMessageError(f"Message {index}: passages must be Passage objects with text strings, got {passage!r:.80}.")
    from .images import check_image

    for number, image in enumerate(getattr(message, "images", ()), 1):
        if not isinstance(image, ImageItem):
            raise InvalidMessageError(f"Message {index}: images must be ImageItem objects, got {type(image).__name__}.")
        check_image(image, f"Message {index}: image {number}")
    return message


def with_later_messages(full: list, call: list, same=operator.eq) -> list:
    """The drafter's conversation for a call that passes `full_messages=full` beside its own (compressed)
    messages: `full`, led by the call's system message when it has none, then the call's messages after the last
    one the two share (what the caller appended last, e.g. an instruction, belongs to both views); if they share
    none, `full` alone. `same(a, b)`: message equality (integrations match their framework's messages by id)."""
    def role(message):
        return getattr(message, "role", None) or getattr(message, "type", None)

    out = list(full)
    if call and role(call[0]) == "system" and not (out and role(out[0]) == "system"):
        out.insert(0, call[0])
    shared = [i for i, message in enumerate(call) if any(same(message, f) for f in out)]
    return out + (list(call[shared[-1] + 1:]) if shared else [])
