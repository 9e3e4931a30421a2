"""AsymSpecLLM: asymspec-agents as a LlamaIndex `FunctionCallingLLM`.

A thin translator: LlamaIndex `ChatMessage`s and tools become the core's messages and `ToolSpec`s, the core's
`AsymSpecChat` renders the two views, decodes (tool calls grammar-constrained) and parses, and its `ChatReply`
becomes a `ChatResponse`:

    message.blocks          TextBlock(text) + one ToolCallBlock(tool_call_id, tool_name, tool_kwargs) per call
    raw["usage"]            prompt_tokens (the verifier's compressed view), completion_tokens, total_tokens,
                            full_prompt_tokens (the drafter's full view): what TokenCountingHandler reads
    additional_kwargs       the same counts, "asymspec_stats" (GenerationStats.to_dict()), "compression" (report),
                            "invalid_tool_calls" (calls the model wrote but that do not parse), "finish_reason"

Retrieved passages ride on a user message as `additional_kwargs["passages"]` (core `Passage`s, dicts, or
LlamaIndex `NodeWithScore`/`BaseNode`s): the drafter reads them whole, the verifier a query-aware compressed form.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Optional, Sequence, Union

from llama_index.core.base.llms.types import (ChatMessage, ChatResponse, ChatResponseAsyncGen, ChatResponseGen,
                                              CompletionResponse, CompletionResponseAsyncGen, CompletionResponseGen,
                                              LLMMetadata, MessageRole, ToolCallBlock)
from llama_index.core.base.llms.generic_utils import (achat_to_completion_decorator, astream_chat_to_completion_decorator,
                                                     chat_to_completion_decorator, stream_chat_to_completion_decorator)
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, create_model
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection

from asymspec_agents import AsymSpecEngine, GenerationConfig
from asymspec_agents.aio import iterate_in_thread
from asymspec_agents.chat import AsymSpecChat
from asymspec_agents.context import UserMessage
from asymspec_agents.context.messages import with_later_messages
from asymspec_agents.context.tool_format import ParsedToolCall
from asymspec_agents.engine.config import setting_fields
from asymspec_agents.errors import InvalidInputError
from asymspec_agents.models import AUTO, DEFAULT_VERIFIER, resolve_pair

from .messages import assistant_message, to_chat_response, to_core_messages, to_tool_specs, tool_kwargs

GENERATION_FIELDS = setting_fields()  # GenerationConfig's settings, declared as this LLM's fields
ALIASES = {"max_tokens": "max_new_tokens"}  # LlamaIndex / OpenAI spelling -> GenerationConfig field
GenerationSettings = create_model("GenerationSettings", __config__=ConfigDict(arbitrary_types_allowed=True), **{
    name: (kind, Field(default_factory=factory, description=text, exclude=name == "decisions") if factory
           else Field(default=default, description=text))
    for name, (kind, default, factory, text) in GENERATION_FIELDS.items()})
CHAT_OPTIONS = {"tools", "tool_choice", "parallel_tool_calls", "response_schema", "query"}


class AsymSpecLLM(FunctionCallingLLM, GenerationSettings):
    """A drafter reads the whole conversation, a verifier a compressed memory of it; AsymSpec decoding joins them.

        llm = AsymSpecLLM(max_new_tokens=256)        # the default pair: bundled-agent, bundled-agent-small
        agent = FunctionAgent(tools=[...], llm=llm)

    `engine=` takes an already built `AsymSpecEngine` instead of names (one engine per model pair per process:
    names go through `AsymSpecEngine.shared`). `policy=` is the dual-view memory's `CompressionPolicy`.
    Per call, keyword arguments named like `GenerationConfig` fields (and `max_tokens`) override the settings;
    `full_messages=` gives the drafter the conversation before the caller's own compression (the verifier reads
    `messages`), and `with_full_history(memory)` does so from an agent's `Memory` on every call.
    """

    verifier: str = Field(default=DEFAULT_VERIFIER, description="Verifier: hub id, local folder, .gguf file, a "
                          "bundled name ('bundled', the default; 'bundled-agent': it tuned to call tools), or a vLLM "
                          "server's 'http://host:port/v1'.")
    drafter: Optional[str] = Field(default=AUTO, description="Drafter: same forms as the verifier (another family is "
                                   "bridged); 'auto': the verifier's matched drafter (the one distilled from a bundled "
                                   "verifier, else its own weights); None allows only modes full and compressed.")
    tokenizer: Optional[str] = Field(default=None, description="The pair's tokenizer (hub id or folder), needed only "
                                     "when both models are on servers whose folders this machine cannot read.")
    model_name: Optional[str] = Field(default=None, description="Name in metadata; default 'asymspec:<verifier>+<drafter>'.")

    _chat: AsymSpecChat = PrivateAttr()
    _memory: Any = PrivateAttr(default=None)  # with_full_history: the drafter reads all of this memory
    _react_tools: Optional[list] = PrivateAttr(default=None)
    _react_initial_choice: Optional[str] = PrivateAttr(default=None)

    def __init__(self, *, engine: AsymSpecEngine | None = None, policy=None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if engine is None:
            engine = AsymSpecEngine.shared(self.verifier, self.drafter, tokenizer=self.tokenizer)
        elif self.model_name is None:  # the names describe no model when an engine is passed in
            self.model_name = "asymspec:" + "+".join(_model_path(m) for m in (engine.verifier, engine.drafter) if m is not None)
        self.generation_config()  # raises ConfigError on out-of-range settings
        self._chat = AsymSpecChat.shared(engine, policy)  # one memory and grammar compiler per engine and policy

    @classmethod
    def class_name(cls) -> str:
        return "AsymSpecLLM"

    @property
    def metadata(self) -> LLMMetadata:
        pair = [str(name) for name in resolve_pair(self.verifier, self.drafter) if name is not None]
        return LLMMetadata(context_window=self._chat.engine.context_window, num_output=self.max_new_tokens,
                           model_name=self.model_name or "asymspec:" + "+".join(pair), is_chat_model=True,
                           is_function_calling_model=True)

    @property
    def engine(self) -> AsymSpecEngine:
        return self._chat.engine

    @property
    def chat_core(self) -> AsymSpecChat:
        """The framework-neutral chat turn this class translates to (its dual-view memory and engine)."""
        return self._chat

    def generation_config(self) -> GenerationConfig:
        return GenerationConfig(**{name: getattr(self, name) for name in GENERATION_FIELDS})

    def with_full_history(self, memory: Any) -> "AsymSpecLLM":
        """This LLM, for an agent that keeps its chat in `memory` (a LlamaIndex `Memory`, or anything with
        `get_all()`): the drafter reads the memory's whole history on every call, the verifier what the agent
        sends — what the memory returns under its token limit, with its memory blocks.

            memory = Memory.from_defaults(token_limit=2000)
            agent = FunctionAgent(tools=tools, llm=llm.with_full_history(memory))
            await agent.run("...", memory=memory)
        """
        if not callable(getattr(memory, "get_all", None)):
            raise InvalidInputError(f"with_full_history needs a memory with get_all(), got {type(memory).__name__}.")
        copy = self.model_copy()
        copy._chat, copy._memory = self._chat, memory
        copy._react_tools, copy._react_initial_choice = self._react_tools, self._react_initial_choice
        return copy

    def for_react(self, tools: Sequence[Any], initial_tool_choice: Optional[str] = None) -> "AsymSpecLLM":
        """This LLM for `ReActAgent(tools=tools, llm=llm.for_react(tools))`: same engine and memory, but every reply
        is one grammar-constrained ReAct step (`Thought:` line, then `Action:` one of `tools` with an `Action Input:`
        valid for its schema, or `Answer:`). The ReAct prompt describes the tools, so the views add no tools block.

        `initial_tool_choice` ("required" or a tool name), like FunctionAgent's: the step answering a fresh user
        message (the last message is the user's and not an `Observation:`) must take an action."""
        llm = self.model_copy()
        llm._chat = self._chat
        llm._react_tools = to_tool_specs(tools)
        llm._react_initial_choice = initial_tool_choice
        return llm

    # -----------------------------------------------------------------------------------------------------------
    # Token counting for LlamaIndex budgets

    @property
    def tokenizer_fn(self) -> Callable[[str], list[int]]:
        """Encode text with the verifier's tokenizer (no special tokens): for `Settings.tokenizer`,
        `PromptHelper(tokenizer=...)` or memory token limits."""
        tokenizer = self._chat.engine.tokenizer
        return lambda text: tokenizer.encode(text, add_special_tokens=False)

    def use_as_global_tokenizer(self) -> None:
        """Make LlamaIndex count tokens with the verifier's tokenizer everywhere (`Settings.tokenizer`)."""
        from llama_index.core import Settings

        Settings.tokenizer = self.tokenizer_fn

    def count_tokens(self, messages: Sequence[ChatMessage], tools: Sequence | None = None) -> int:
        """Tokens the verifier reads for these messages (the compressed view)."""
        return self._chat.count_tokens(to_core_messages(messages), to_tool_specs(tools) or None)

    # -----------------------------------------------------------------------------------------------------------
    # Chat and completion

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        core_messages = to_core_messages(messages)
        reply = self._chat.reply(core_messages, **self._request(kwargs, core_messages))
        return to_chat_response(reply)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        core_messages = to_core_messages(messages)  # bad input fails on the call, not on the first chunk
        request = self._request(kwargs, core_messages)
        return self._stream_responses(core_messages, request)

    # Completions are one-user-message chats (the prompt is always wrapped in the chat template; `formatted` is
    # accepted and ignored), converted by llama-index's own helpers.
    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return chat_to_completion_decorator(self.chat)(prompt, **kwargs)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        return stream_chat_to_completion_decorator(self.stream_chat)(prompt, **kwargs)

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        core_messages = to_core_messages(messages)
        request = self._request(kwargs, core_messages)
        last = None  # the engine runs in a worker thread; cancelling this call stops it between blocks
        async for last in iterate_in_thread(lambda: self._stream_responses(core_messages, request)):
            pass
        return last

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        core_messages = to_core_messages(messages)
        request = self._request(kwargs, core_messages)
        return iterate_in_thread(lambda: self._stream_responses(core_messages, request))

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return await achat_to_completion_decorator(self.achat)(prompt, **kwargs)

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        return await astream_chat_to_completion_decorator(self.astream_chat)(prompt, **kwargs)

    # -----------------------------------------------------------------------------------------------------------
    # Tools

    def _prepare_chat_with_tools(self, tools: Sequence[Any], user_msg: Optional[Union[str, ChatMessage]] = None,
                                 chat_history: Optional[list[ChatMessage]] = None, verbose: bool = False,
                                 allow_parallel_tool_calls: bool = False, tool_required: bool = False,
                                 **kwargs: Any) -> dict[str, Any]:
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(ChatMessage(role=MessageRole.USER, content=user_msg) if isinstance(user_msg, str) else user_msg)
        tool_choice = kwargs.pop("tool_choice", None)
        if tool_required and tool_choice in (None, "auto"):
            tool_choice = "required"
        return {"messages": messages, "tools": to_tool_specs(tools) or None,
                "tool_choice": tool_choice, "parallel_tool_calls": allow_parallel_tool_calls, **kwargs}

    def _validate_chat_with_tools_response(self, response: ChatResponse, tools: Sequence[Any],
                                           allow_parallel_tool_calls: bool = False, **kwargs: Any) -> ChatResponse:
        if not allow_parallel_tool_calls:
            calls = [b for b in response.message.blocks if isinstance(b, ToolCallBlock)]
            if len(calls) > 1:
                response.message.blocks = [b for b in response.message.blocks
                                           if not isinstance(b, ToolCallBlock) or b is calls[0]]
        return response

    def get_tool_calls_from_response(self, response: ChatResponse, error_on_no_tool_call: bool = True,
                                     **kwargs: Any) -> list[ToolSelection]:
        """The tool calls of a response, final or streamed (every streamed response holds the calls completed so
        far). Calls the model wrote but that do not parse are in `response.additional_kwargs["invalid_tool_calls"]`."""
        calls = [ToolSelection(tool_id=block.tool_call_id or "", tool_name=block.tool_name,
                               tool_kwargs=tool_kwargs(block.tool_kwargs))
                 for block in response.message.blocks if isinstance(block, ToolCallBlock)]
        if not calls and error_on_no_tool_call:
            invalid = response.additional_kwargs.get("invalid_tool_calls") or []
            detail = "; ".join(f"{c['name'] or '?'}: {c['error']}" for c in invalid)
            raise ValueError("Expected at least one tool call, but the response has none"
                             + (f" (malformed calls: {detail})." if detail else "."))
        return calls

    # -----------------------------------------------------------------------------------------------------------

    def _request(self, kwargs: dict[str, Any], messages: Sequence[Any] = ()) -> dict[str, Any]:
        """Split call keywords into chat options and GenerationConfig overrides; anything else is an error."""
        kwargs = dict(kwargs)
        kwargs.pop("formatted", None)  # completion prompts are always wrapped in the chat template
        request = {key: kwargs.pop(key) for key in CHAT_OPTIONS if key in kwargs}
        full = kwargs.pop("full_messages", None)
        if full is None and self._memory is not None:
            full = self._memory.get_all()
        if full is not None:
            request["full_messages"] = with_later_messages(to_core_messages(list(full)), list(messages))
        if request.get("tools") is not None:
            request["tools"] = to_tool_specs(request["tools"]) or None
        elif self._react_tools:
            request.update(tools=self._react_tools, tool_format="react")
            if self._react_initial_choice and "tool_choice" not in request and _answers_the_user(messages):
                request["tool_choice"] = self._react_initial_choice
        overrides = {ALIASES.get(key, key): kwargs.pop(key) for key in list(kwargs)
                     if ALIASES.get(key, key) in GENERATION_FIELDS}
        if kwargs:
            raise InvalidInputError(
                f"AsymSpecLLM does not know the options {sorted(kwargs)}; pass GenerationConfig fields "
                f"({', '.join(sorted(GENERATION_FIELDS))}), max_tokens, or {', '.join(sorted(CHAT_OPTIONS))}.")
        if overrides:
            request["config"] = dataclasses.replace(self.generation_config(), **overrides)
        else:
            request["config"] = self.generation_config()
        return request

    def _stream_responses(self, messages: list, request: dict[str, Any]) -> Iterator[ChatResponse]:
        text, calls = [], []
        for delta in self._chat.stream(messages, **request):
            if delta.reply is not None:
                yield to_chat_response(delta.reply, delta="")
                return
            if delta.text:
                text.append(delta.text)
            if isinstance(delta.tool_call, ParsedToolCall):
                calls.append(delta.tool_call)
            if delta.text or isinstance(delta.tool_call, ParsedToolCall):
                yield ChatResponse(message=assistant_message("".join(text), calls), delta=delta.text)


def _answers_the_user(messages: Sequence[Any]) -> bool:
    """The next reply is the first step on a user's message (ReAct observations come as user turns)."""
    return bool(messages) and isinstance(messages[-1], UserMessage) and not messages[-1].content.startswith("Observation:")


def _model_path(model: Any) -> str:
    return getattr(model.config, "_name_or_path", "") or type(model).__name__
