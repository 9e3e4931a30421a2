"""OpenAI's chat-completions and completions wire formats, translated to and from `AsymSpecChat` (no HTTP here).

Requests are checked field by field; everything the format allows and the pair cannot do (several choices,
log-probabilities, images by remote URL) is refused with a message instead of being ignored. Images in user and
tool messages come as `image_url` parts with base64 data URLs and reach the models as stand-in text
(context/render.py). Tool results name their tool by
the id of the call they answer, as OpenAI's messages do. A reply's tool call that could not be parsed (cut off by
`max_tokens`) goes out as the text the model wrote, in the content: as a call, an agent (LangGraph's tool node)
would answer it with an error result while its client drops the call itself from the history it sends back, and
the next request would name a call that no message holds.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from ..chat import ChatReply
from ..context import ImageItem
from ..context.images import image_from_url
from ..context.tool_format import TOOL_CALL_OPEN, ParsedToolCall
from ..engine import GenerationConfig
from ..engine.config import CHOICES, SEEDS, setting_fields
from ..errors import ConfigError, InvalidInputError, InvalidMessageError

SETTING_NAMES = {f.name for f in fields(GenerationConfig)} - {"decisions", "stop", "max_new_tokens"}


# What messages and tools look like, for the OpenAPI document (clients and fuzzers read it); the body is checked
# by `to_messages` and the core's validation, whose errors say what to change.
_TEXT_PART = {"type": "object", "required": ["type", "text"],
              "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
_IMAGE_PART = {"type": "object", "required": ["type", "image_url"], "properties": {  # a data URL: nothing is fetched
    "type": {"const": "image_url"},
    "image_url": {"type": "object", "required": ["url"], "properties": {"url": {"type": "string"}}}}}
_TEXT = {"anyOf": [{"type": "string"}, {"type": "array", "items": _TEXT_PART}]}  # a string, or text parts (joined)
_TEXT_AND_IMAGES = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"anyOf": [_TEXT_PART, _IMAGE_PART]}}]}
_TOOL_CALL = {"type": "object", "required": ["id", "type", "function"], "properties": {
    "id": {"type": "string"}, "type": {"const": "function"},
    "function": {"type": "object", "required": ["name", "arguments"],
                 "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}}}}}
MESSAGE_SCHEMA = {"oneOf": [
    {"type": "object", "required": ["role", "content"],
     "properties": {"role": {"enum": ["system", "developer"]}, "content": _TEXT}},
    {"type": "object", "required": ["role", "content"],
     "properties": {"role": {"const": "user"}, "content": _TEXT_AND_IMAGES}},
    {"type": "object", "required": ["role"], "properties": {
        "role": {"const": "assistant"}, "content": {"anyOf": [_TEXT, {"type": "null"}]},
        "tool_calls": {"type": "array", "items": _TOOL_CALL}}},
    {"type": "object", "required": ["role", "tool_call_id", "content"],
     "properties": {"role": {"const": "tool"}, "tool_call_id": {"type": "string"}, "content": _TEXT_AND_IMAGES}}]}
TOOL_CHOICE_SCHEMA = {"anyOf": [
    {"enum": ["none", "auto", "required"]},
    {"type": "object", "required": ["type", "function"], "properties": {
        "type": {"const": "function"},
        "function": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}}},
    {"type": "null"}]}
RESPONSE_FORMAT_SCHEMA = {"anyOf": [
    {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["text", "json_object"]}}},
    {"type": "object", "required": ["type", "json_schema"], "properties": {
        "type": {"const": "json_schema"},
        "json_schema": {"type": "object", "required": ["name", "schema"],
                        "properties": {"name": {"type": "string"}, "schema": {"type": "object"}}}}},
    {"type": "null"}]}
TOOL_SCHEMA = {"type": "object", "required": ["type", "function"], "properties": {
    "type": {"const": "function"},
    "function": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string"}, "description": {"type": "string"}, "parameters": {"type": "object"}}}}}


def _settings_schema() -> dict:
    """The `asymspec` extension: GenerationConfig's settings, each with its type, its choices and its help."""
    json_types = {bool: "boolean", int: "integer", float: "number", str: "string"}
    properties = {}
    for name, (kind, _, _, help_text) in setting_fields(exclude=("decisions", "stop", "max_new_tokens")).items():
        base = next((t for t in get_args(kind) if t is not type(None)), kind)
        schema = {"enum": list(CHOICES[name])} if name in CHOICES else {"type": json_types[base]}
        properties[name] = {**schema, "description": help_text}
    return {"anyOf": [{"type": "object", "properties": properties, "additionalProperties": False},
                      {"type": "null"}]}


class ChatCompletionRequest(BaseModel):
    """The request body of `POST /v1/chat/completions` (fields this server does not use are ignored)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1, json_schema_extra={"items": MESSAGE_SCHEMA})
    tools: list[dict[str, Any]] | None = Field(default=None, json_schema_extra={
        "anyOf": [{"type": "array", "items": TOOL_SCHEMA}, {"type": "null"}]})
    tool_choice: str | dict[str, Any] | None = Field(default=None, json_schema_extra=TOOL_CHOICE_SCHEMA)
    parallel_tool_calls: bool = True
    response_format: dict[str, Any] | None = Field(default=None, json_schema_extra=RESPONSE_FORMAT_SCHEMA)
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=SEEDS[0], le=SEEDS[1])
    n: int = Field(default=1, json_schema_extra={"enum": [1]})
    logprobs: bool | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    # vLLM's field: prefix caches are shared only among requests with the same salt (and the same API key)
    cache_salt: str | None = Field(default=None, max_length=256)
    # extension: GenerationConfig settings for this call (mode, beta, ...)
    asymspec: dict[str, Any] | None = Field(default=None, json_schema_extra=_settings_schema())


class CompletionRequest(BaseModel):
    """The request body of `POST /v1/completions`: a plain prompt continued as it stands (fields this server does
    not use are ignored; those asking for what it cannot do are refused)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    prompt: str | list[Any] = Field(json_schema_extra={"anyOf": [
        {"type": "string", "minLength": 1}, {"type": "array", "items": {"type": "string", "minLength": 1},
                                             "minItems": 1, "maxItems": 1}]})
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    seed: int | None = Field(default=None, ge=SEEDS[0], le=SEEDS[1])
    n: int = Field(default=1, json_schema_extra={"enum": [1]})
    best_of: int | None = Field(default=None, json_schema_extra={"enum": [1, None]})
    echo: bool = Field(default=False, json_schema_extra={"enum": [False]})
    logprobs: int | None = Field(default=None, json_schema_extra={"type": "null"})
    suffix: str | None = Field(default=None, json_schema_extra={"type": "null"})
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    cache_salt: str | None = Field(default=None, max_length=256)
    asymspec: dict[str, Any] | None = Field(default=None, json_schema_extra=_settings_schema())


def chat_arguments(request: ChatCompletionRequest, base: GenerationConfig) -> dict[str, Any]:
    """`AsymSpecChat.stream` keyword arguments for a request, or `InvalidInputError` saying what to change."""
    if request.logprobs:
        raise InvalidInputError("logprobs are not returned by this server; omit `logprobs`.")
    return dict(messages=to_messages(request.messages), tools=request.tools or None,
                tool_choice=_tool_choice(request.tool_choice), parallel_tool_calls=request.parallel_tool_calls,
                response_schema=_response_schema(request.response_format),
                config=_config(request, base, request.max_completion_tokens or request.max_tokens))


def completion_arguments(request: CompletionRequest, base: GenerationConfig) -> dict[str, Any]:
    """`AsymSpecChat.complete` keyword arguments for a request, or `InvalidInputError` saying what to change."""
    refused = {"echo": request.echo, "logprobs": request.logprobs is not None, "suffix": bool(request.suffix),
               "best_of": (request.best_of or 1) != 1}
    for name, asked in refused.items():
        if asked:
            raise InvalidInputError(f"{name} is not supported by this server (it returns the continuation only, "
                                    f"one choice, no log-probabilities); omit `{name}`.")
    prompt = request.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1 or not isinstance(prompt[0], str):
            raise InvalidInputError("prompt must be one string (or a list holding one string): this server "
                                    "continues one prompt per request, given as text, not token ids.")
        prompt = prompt[0]
    if not prompt:
        raise InvalidInputError("prompt is empty; send the text to continue.")
    return dict(prompt=prompt, config=_config(request, base, request.max_tokens))


def _config(request: ChatCompletionRequest | CompletionRequest, base: GenerationConfig,
            max_tokens: int | None) -> GenerationConfig:
    """The request's generation settings on top of the server's: OpenAI's fields and the `asymspec` extension."""
    if request.n != 1:
        raise InvalidInputError(f"n={request.n}: this server returns one choice per request; send n=1 (or omit it).")
    settings = dict(request.asymspec or {})
    unknown = set(settings) - SETTING_NAMES
    if unknown:
        raise InvalidInputError(f"asymspec settings {sorted(unknown)} are unknown; use some of {sorted(SETTING_NAMES)}.")
    for name in ("temperature", "top_p", "seed"):
        if getattr(request, name) is not None:
            settings[name] = getattr(request, name)
    if max_tokens is not None:
        settings["max_new_tokens"] = max_tokens
    stop = [request.stop] if isinstance(request.stop, str) else list(request.stop or [])
    try:
        return GenerationConfig(**{**_base_settings(base), **settings, "stop": [*base.stop, *stop]})
    except (TypeError, ConfigError) as exc:
        raise InvalidInputError(f"Invalid generation settings: {exc}") from exc


def to_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages as the core's dicts: text parts joined, "developer" read as "system", tool-call arguments
    parsed from their JSON strings, and each tool result given the name of the call it answers."""
    names: dict[str, str] = {}
    out = []
    for index, message in enumerate(messages):
        role = message.get("role")
        text, images = _content(message.get("content"), index, images_allowed=role in ("user", "tool"))
        item: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": text}
        if images:
            item["images"] = images
        if role == "assistant" and message.get("tool_calls"):
            calls = [_tool_call(call, index) for call in message["tool_calls"]]
            item["tool_calls"] = [call for call in calls if isinstance(call, dict)]
            names.update({call["id"]: call["function"]["name"] for call in item["tool_calls"]})
            # a call whose arguments are not JSON (the model was cut off; clients send such calls back as they got
            # them) is kept as the text the model wrote
            item["content"] += "".join(f"\n{TOOL_CALL_OPEN}\n{call}" for call in calls if isinstance(call, str))
        if role == "tool":
            item["tool_call_id"] = message.get("tool_call_id")
            item["name"] = message.get("name") or names.get(message.get("tool_call_id"), "")
        out.append(item)
    return out


def completion(reply: ChatReply, model: str, request_id: str) -> dict[str, Any]:
    """The response body of a non-streamed completion."""
    text = reply.text + "".join(call.raw for call in reply.invalid_tool_calls)
    message: dict[str, Any] = {"role": "assistant", "content": text or (None if reply.tool_calls else "")}
    if reply.tool_calls:
        message["tool_calls"] = [_call(call) for call in reply.tool_calls]
    return {"id": request_id, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason, "logprobs": None}],
            "usage": usage(reply), "asymspec": reply.summary()}


def chunk(model: str, request_id: str, delta: dict[str, Any] | None = None, finish_reason: str | None = None,
          reply: ChatReply | None = None) -> dict[str, Any]:
    """One streamed `chat.completion.chunk`; with `reply` and no delta it is the usage chunk (no choices)."""
    choice = None if delta is None else {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
    return _streamed("chat.completion.chunk", model, request_id, choice, reply)


def text_completion(reply: ChatReply, model: str, request_id: str) -> dict[str, Any]:
    """The response body of a non-streamed `/v1/completions` request."""
    return {**text_chunk(model, request_id, reply.text, reply.finish_reason), "usage": usage(reply),
            "asymspec": reply.summary()}


def text_chunk(model: str, request_id: str, text: str | None = None, finish_reason: str | None = None,
               reply: ChatReply | None = None) -> dict[str, Any]:
    """One streamed `text_completion`; with `reply` and no text it is the usage chunk (no choices)."""
    choice = None if text is None else {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return _streamed("text_completion", model, request_id, choice, reply)


def _streamed(kind: str, model: str, request_id: str, choice: dict | None, reply: ChatReply | None) -> dict[str, Any]:
    """A chunk of either format: its one choice, or none; with `reply`, the usage and the `asymspec` summary."""
    body: dict[str, Any] = {"id": request_id, "object": kind, "created": int(time.time()), "model": model,
                            "choices": [] if choice is None else [choice]}
    if reply is not None:
        body["usage"], body["asymspec"] = usage(reply), reply.summary()
    return body


def tool_call_delta(call: ParsedToolCall, index: int) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, **_call(call)}]}


def usage(reply: ChatReply) -> dict[str, Any]:
    """Prompt tokens are the verifier's input (the compressed view), `cached_tokens` those of it read from the
    cache; the full view's count is in the `asymspec` field (`ChatReply.summary()`)."""
    cached = sum(s.reused_tokens for s in reply.stats.streams.values() if s.role == "verifier")
    return {"prompt_tokens": reply.usage.input_tokens, "completion_tokens": reply.usage.output_tokens,
            "total_tokens": reply.usage.total_tokens, "prompt_tokens_details": {"cached_tokens": cached}}


@dataclass(frozen=True)
class WireFormat:
    """How one endpoint's replies go out: the whole response, and a stream's chunks (opening, text, finish,
    usage), each `(model, request id, ...) -> body`."""

    id_prefix: str
    response: Callable[[ChatReply, str, str], dict]
    opening: Callable[[str, str], dict] | None
    text: Callable[[str, str, str], dict]
    finish: Callable[[str, str, ChatReply], dict]
    usage: Callable[[str, str, ChatReply], dict]


CHAT = WireFormat("chatcmpl-", completion, lambda model, id_: chunk(model, id_, {"role": "assistant", "content": ""}),
                  lambda model, id_, text: chunk(model, id_, {"content": text}),
                  lambda model, id_, reply: chunk(model, id_, {}, reply.finish_reason),
                  lambda model, id_, reply: chunk(model, id_, reply=reply))
TEXT = WireFormat("cmpl-", text_completion, None, lambda model, id_, text: text_chunk(model, id_, text),
                  lambda model, id_, reply: text_chunk(model, id_, "", reply.finish_reason),
                  lambda model, id_, reply: text_chunk(model, id_, reply=reply))


def error_body(message: str, kind: str = "invalid_request_error", code: str | None = None,
               param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def new_request_id(prefix: str = "chatcmpl-") -> str:
    return prefix + uuid.uuid4().hex[:24]


def _call(call: ParsedToolCall) -> dict[str, Any]:
    arguments = json.dumps(call.arguments, ensure_ascii=False)
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments}}


def _base_settings(base: GenerationConfig) -> dict[str, Any]:
    return {f.name: getattr(base, f.name) for f in fields(GenerationConfig) if f.name != "stop"}


def _content(content, index: int, images_allowed: bool) -> tuple[str, list[ImageItem]]:
    """A message's text (a string, or its text parts joined) and its images (`image_url` parts with data URLs, in
    user and tool messages)."""
    if content is None or isinstance(content, str):
        return content or "", []
    if not isinstance(content, list):
        raise InvalidMessageError(f"Message {index}: content must be a string or a list of text parts, "
                                  f"got {type(content).__name__}.")
    parts, images = [], []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif kind == "image_url" and images_allowed:
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            images.append(image_from_url(url, f"Message {index}: image {len(images) + 1}"))
        else:
            allowed = ("'text' and 'image_url' (with a data URL)" if images_allowed
                       else "'text' (images go in user and tool messages)")
            raise InvalidMessageError(f"Message {index}: content part of type {kind!r} is not supported; send parts "
                                      f"of type {allowed}.")
    return "".join(parts), images


def _tool_call(call, index: int) -> dict[str, Any] | str:
    """A call in the core's form, or the raw text of one whose arguments are not a JSON object."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise InvalidMessageError(f"Message {index}: a tool call needs {{'id', 'type': 'function', "
                                  f"'function': {{'name', 'arguments'}}}}, got {call!r:.120}.")
    arguments = function.get("arguments") or "{}"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return {"id": call.get("id") or "", "function": {"name": function["name"], "arguments": arguments}}


def _tool_choice(choice) -> str | None:
    if choice is None or isinstance(choice, str):
        return choice
    name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" else None
    if not isinstance(name, str):
        raise InvalidInputError(f"tool_choice {choice!r:.120} is not understood; use 'none', 'auto', 'required' or "
                                "{'type': 'function', 'function': {'name': ...}}.")
    return name


def _response_schema(response_format: dict | None) -> dict | None:
    kind: Literal["text", "json_object", "json_schema"] | None = (response_format or {}).get("type")
    if response_format is None or kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    schema = (response_format.get("json_schema") or {}).get("schema") if kind == "json_schema" else None
    if not isinstance(schema, dict):
        raise InvalidInputError("response_format must be {'type': 'text'}, {'type': 'json_object'} or "
                                "{'type': 'json_schema', 'json_schema': {'name': ..., 'schema': {...}}}.")
    return schema
