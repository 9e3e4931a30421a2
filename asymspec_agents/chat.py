"""AsymSpecChat: messages and tools in, a reply with text and tool calls out. Framework-neutral.

It joins the three core parts every integration needs, so LangChain and LlamaIndex stay thin translators:
the dual-view memory renders the conversation, the engine decodes (tool calls and structured output are
grammar-constrained), and the output parser splits text from tool calls. Streaming hides tool-call markup
from the text and hands each call over as soon as its closing tag is committed.
"""

from __future__ import annotations

import threading
import uuid
import warnings
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from .context import DualContext, DualViews, ToolSpec
from .context.messages import validate_conversation
from .context.tools import check_tool_choice
from .context.tool_format import (TOOL_CALL_CLOSE, TOOL_CALL_OPEN, InvalidToolCall, ParsedToolCall,
                                  parse_tool_calls)
from .engine import AsymSpecEngine, GenerationConfig, GenerationStats
from .errors import InvalidInputError
from .models.remote import is_remote


class WindowWarning(UserWarning):
    """A conversation no longer fits the models' window and its views drop old turns (shown once per
    conversation by Python's default warning filter; the numbers per reply are in its summary)."""


def _opening(messages, length: int = 48) -> str:
    """The start of a conversation's first request: what tells one conversation from another in a warning."""
    for message in validate_conversation(messages):
        if message.role == "user":
            text = message.content if isinstance(message.content, str) else str(message.content)
            return text[:length] + ("…" if len(text) > length else "")
    return ""


@dataclass
class Usage:
    input_tokens: int  # the verifier's input: the compressed view
    output_tokens: int
    full_input_tokens: int  # the drafter's input: the full view

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class ChatReply:
    text: str  # visible text: tool-call blocks removed
    tool_calls: list[ParsedToolCall]
    invalid_tool_calls: list[InvalidToolCall]
    finish_reason: str  # "stop", "length" or "tool_calls"
    usage: Usage
    stats: GenerationStats
    raw_text: str  # everything the model wrote
    views: DualViews | None = None
    token_ids: list[int] = field(default_factory=list)  # the generated tokens
    duplicate_tool_calls: int = 0  # calls the model repeated word for word in this reply, dropped

    def summary(self) -> dict:
        """What AsymSpec did for this reply, as plain numbers: what integrations and the server attach to it."""
        stats = self.stats
        return {
            "mode": stats.mode,
            "acceptance": stats.acceptance,  # the rule: "ratio" (the paper's) or "fused"
            "acceptance_rate": round(stats.acceptance_rate, 4),
            "drafted": stats.drafted,
            "accepted": stats.accepted,
            "blocks": stats.blocks,
            "new_tokens": stats.new_tokens,
            "decision_points": stats.decision_points,
            "decision_points_at_slot0": stats.decision_points_at_slot0,
            "full_input_tokens": self.usage.full_input_tokens,
            "compressed_input_tokens": self.usage.input_tokens,
            "duplicate_tool_calls": self.duplicate_tool_calls,
            # old turns dropped to fit the models' window (DualContext.fit_window): the drafter's and the verifier's
            "full_view_truncated_tokens": self.views.truncated.get("full", 0) if self.views else 0,
            "comp_view_truncated_tokens": self.views.truncated.get("comp", 0) if self.views else 0,
            "cache": stats.cache,  # "continued": this conversation's cached prefix served the call
            "prefilled_tokens": {name: s.prefill_tokens for name, s in stats.streams.items()},  # read afresh
            "verifier_flops": stats.flops("verifier"),
            "drafter_flops": stats.flops("drafter"),
            "wall_seconds": round(stats.wall_seconds, 4),
        }


@dataclass
class ChatDelta:
    """One step of a streamed reply: new visible text, or one completed tool call; the last carries the reply."""

    text: str = ""
    tool_call: ParsedToolCall | InvalidToolCall | None = None
    reply: ChatReply | None = None


def with_turn_stops(config: GenerationConfig, chat_format) -> GenerationConfig:
    """`config` whose stops include the chat format's turn ends: a base model's plain transcript ends a reply where
    the next user turn would begin (chat templates have none: their end-of-turn token is EOS)."""
    missing = [s for s in chat_format.stop if s not in config.stop]
    return replace(config, stop=[*config.stop, *missing]) if missing else config


_shared: "weakref.WeakKeyDictionary[AsymSpecEngine, dict[str, AsymSpecChat]]" = weakref.WeakKeyDictionary()
_shared_lock = threading.Lock()


class AsymSpecChat:
    """One engine and one dual-view memory (whose compression cache persists across calls)."""

    def __init__(self, engine: AsymSpecEngine, *, policy=None, config: GenerationConfig | None = None, context=None):
        self.engine = engine
        self.config = config or GenerationConfig()
        # surprisal pruning scores verifier-token ids with the drafter: only possible when they share a vocabulary
        drafter = engine.drafter if engine.bridge is None and not is_remote(engine.drafter) else None
        self.context = context or DualContext(engine.tokenizer, policy, drafter=drafter)
        self._grammars = None
        self._grammar_lock = threading.Lock()

    @classmethod
    def shared(cls, engine: AsymSpecEngine, policy=None) -> "AsymSpecChat":
        """One AsymSpecChat (dual-view memory and grammar compiler) per engine and compression policy in the
        process: chat models built on the same pair share it, so resending a history compresses only what is new
        and grammars compile once. Generation settings are passed per call (`config=`)."""
        key = repr(policy)
        with _shared_lock:
            per_engine = _shared.setdefault(engine, {})
            if key not in per_engine:
                per_engine[key] = cls(engine, policy=policy)
            return per_engine[key]

    def reply(self, messages, **request) -> ChatReply:
        for delta in self.stream(messages, **request):
            if delta.reply is not None:
                return delta.reply
        raise RuntimeError("stream ended without a reply")  # not reachable: the stream always ends with one

    def stream(self, messages, *, tools=None, tool_choice: str | None = None, parallel_tool_calls: bool = True,
               response_schema: dict | None = None, config: GenerationConfig | None = None, query: str | None = None,
               tool_format: str = "hermes", full_messages=None, cache_scope: str | None = None,
               **overrides) -> Iterator[ChatDelta]:
        """`tool_format="react"`: the messages already describe the tools (a ReAct prompt), so the views carry no
        tools block; the reply is one ReAct step constrained by `GrammarBuilder.react_steps` and stays plain text
        (the framework's ReAct parser reads it).

        `full_messages`: the conversation before the caller's own compression (a framework's context middleware);
        the drafter then reads it and the verifier reads `messages`, both whole (`DualContext.render_pair`).
        `cache_scope` (a tenant): the call reuses only caches of calls with the same scope (engine/pool.py)."""
        if tool_format not in ("hermes", "react"):
            raise InvalidInputError(f"tool_format must be 'hermes' or 'react', got {tool_format!r}.")
        specs = _specs(tools) if tools else []
        # tool_choice="none" keeps the tools in the prompt (its grammar forbids a call): the views stay those of
        # the conversation's other steps, whose caches this call then continues
        render_tools = specs if tool_format == "hermes" else []
        config = replace(config or self.config, **overrides) if overrides else (config or self.config)
        window = self._window(config)
        if full_messages is not None:
            views = self.context.render_pair(full_messages, messages, tools=render_tools or None, query=query,
                                             window=window)
        else:
            views = self.context.render(messages, tools=render_tools or None, query=query, window=window)
        if views.truncated:  # the text names the conversation: Python's filter shows it once per conversation
            warnings.warn(WindowWarning(f"The conversation that began {_opening(messages)!r} has outgrown the models' "
                                        "window: its views now drop their oldest turns (each reply's "
                                        "full_view_truncated_tokens and comp_view_truncated_tokens say how many "
                                        "tokens)."), stacklevel=2)
        constraint = self._constraint(specs, tool_choice, parallel_tool_calls, response_schema, tool_format)
        config = with_turn_stops(config, self.context.format)
        splitter = ToolCallSplitter(enabled=bool(render_tools) and response_schema is None)
        raw, token_ids = [], []
        for chunk in self.engine.stream(views.full_ids, views.comp_ids, config, constraint=constraint,
                                        cache_scope=cache_scope):
            raw.append(chunk.text)
            token_ids.extend(chunk.token_ids)
            for delta in splitter.push(chunk.text):
                yield delta
            if chunk.stats is not None:
                for delta in splitter.finish():
                    yield delta
                yield ChatDelta(reply=self._reply("".join(raw), token_ids, chunk, views, splitter))

    def complete(self, prompt: str, *, config: GenerationConfig | None = None, cache_scope: str | None = None,
                 **overrides) -> Iterator[ChatDelta]:
        """A plain prompt continued as it stands, no chat template (what `/v1/completions` asks): the drafter reads
        it whole, the verifier compressed as a user message (`DualContext.render_text`). Deltas of text, then the
        reply (no tool calls; a prompt past the window raises ContextTooLongError)."""
        config = replace(config or self.config, **overrides) if overrides else (config or self.config)
        views = self.context.render_text(prompt, window=self.engine.context_window - config.max_new_tokens)
        text, token_ids = ToolCallSplitter(enabled=False), []
        for chunk in self.engine.stream(views.full_ids, views.comp_ids, config, cache_scope=cache_scope):
            token_ids.extend(chunk.token_ids)
            yield from text.push(chunk.text)
            if chunk.stats is not None:
                yield ChatDelta(reply=self._reply(text.text, token_ids, chunk, views, text))

    def _window(self, config: GenerationConfig) -> int:
        """The most prompt tokens a view may hold: the models' window less room for the reply (at most a
        quarter of the window, so a long max_new_tokens does not cut the conversation short)."""
        window = self.engine.context_window
        return window - min(config.max_new_tokens, window // 4)

    def count_tokens(self, messages, tools=None) -> int:
        """Tokens the verifier reads for this conversation (the compressed view)."""
        return len(self.context.render(messages, tools=_specs(tools) if tools else None).comp_ids)

    @property
    def grammars(self):
        from .grammar import GrammarBuilder

        with self._grammar_lock:
            if self._grammars is None:
                self._grammars = GrammarBuilder(self.engine.tokenizer)
            return self._grammars

    def _constraint(self, specs: list[ToolSpec], tool_choice: str | None, parallel: bool,
                    response_schema: dict | None, tool_format: str):
        """The grammar a request needs: a response schema, ReAct steps, tool calls, or none for free text."""
        if response_schema is not None:
            return self.grammars.json_schema(response_schema)
        check_tool_choice(tool_choice, [spec.name for spec in specs])
        if not specs:
            return None
        if tool_format == "react" and tool_choice != "none":
            return self.grammars.react_steps(specs, tool_choice)
        return self.grammars.tool_calls(specs, tool_choice, parallel)

    @staticmethod
    def _reply(raw_text: str, token_ids: list[int], last_chunk, views: DualViews, splitter: "ToolCallSplitter") -> ChatReply:
        """The reply holds exactly what the stream handed out: same text, same calls, same ids."""
        stats = last_chunk.stats
        usage = Usage(len(views.comp_ids), stats.new_tokens, len(views.full_ids))
        finish = "tool_calls" if splitter.calls else last_chunk.finish_reason
        return ChatReply(splitter.text, splitter.calls, splitter.invalid, finish, usage, stats, raw_text, views, token_ids,
                         splitter.duplicates)


class ToolCallSplitter:
    """Separates streamed text from `<tool_call>…</tool_call>` blocks.

    Text is released as soon as it cannot be the start of an opening tag; a call is parsed and released when its
    closing tag arrives (or, left open, when the stream ends). A call equal to an earlier one of the reply (same
    name and arguments: small models repeat a call once made) is dropped and counted: an agent would run it twice."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._buffer = ""
        self._in_call = False
        self._after_call = False  # newlines that separate calls are markup, not text
        self._text: list[str] = []
        self.calls: list[ParsedToolCall] = []
        self.invalid: list[InvalidToolCall] = []
        self.duplicates = 0

    @property
    def text(self) -> str:
        return "".join(self._text)

    def push(self, text: str) -> list[ChatDelta]:
        deltas = self._split(text) if self.enabled else ([ChatDelta(text=text)] if text else [])
        return self._record(deltas)

    def finish(self) -> list[ChatDelta]:
        return self._record(self._rest())

    def _record(self, deltas: list[ChatDelta]) -> list[ChatDelta]:
        kept = []
        for delta in deltas:
            if isinstance(delta.tool_call, ParsedToolCall):
                if any(_same_call(delta.tool_call, call) for call in self.calls):
                    self.duplicates += 1
                    continue
                self.calls.append(delta.tool_call)
            elif delta.tool_call is not None:
                self.invalid.append(delta.tool_call)
            self._text.append(delta.text)
            kept.append(delta)
        return kept

    def _split(self, text: str) -> list[ChatDelta]:
        self._buffer += text
        deltas = []
        while True:
            if self._after_call:
                self._buffer = self._buffer.lstrip("\n")
                self._after_call = not self._buffer
            if self._in_call:
                end = self._buffer.find(TOOL_CALL_CLOSE)
                if end < 0:
                    return deltas
                block, self._buffer = self._buffer[: end + len(TOOL_CALL_CLOSE)], self._buffer[end + len(TOOL_CALL_CLOSE):]
                deltas.extend(self._calls(TOOL_CALL_OPEN + block))
                self._in_call = False
                self._after_call = True
                continue
            start = self._buffer.find(TOOL_CALL_OPEN)
            if start >= 0:
                if start:
                    deltas.append(ChatDelta(text=self._buffer[:start]))
                self._buffer = self._buffer[start + len(TOOL_CALL_OPEN):]
                self._in_call = True
                continue
            keep = _partial_suffix(self._buffer, TOOL_CALL_OPEN)
            release = self._buffer[: len(self._buffer) - keep]
            self._buffer = self._buffer[len(self._buffer) - keep:]
            if release:
                deltas.append(ChatDelta(text=release))
            return deltas

    def _rest(self) -> list[ChatDelta]:
        if not self.enabled or not self._buffer:
            return []
        rest, self._buffer = self._buffer, ""
        if self._in_call:
            self._in_call = False
            return self._calls(TOOL_CALL_OPEN + rest)
        return [ChatDelta(text=rest)]

    @staticmethod
    def _calls(block: str) -> list[ChatDelta]:
        parsed = parse_tool_calls(block)
        return [ChatDelta(tool_call=_with_id(c)) for c in parsed.tool_calls] + \
               [ChatDelta(tool_call=c) for c in parsed.invalid_tool_calls]


def _partial_suffix(text: str, tag: str) -> int:
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:n]):
            return n
    return 0


def _same_call(a: ParsedToolCall, b: ParsedToolCall) -> bool:
    return a.name == b.name and a.arguments == b.arguments


def _with_id(call: ParsedToolCall) -> ParsedToolCall:
    if call.id is None:
        call.id = "call_" + uuid.uuid4().hex[:24]
    return call


def _specs(tools) -> list[ToolSpec]:
    from .context.tools import validate_tools

    return validate_tools(tools)
