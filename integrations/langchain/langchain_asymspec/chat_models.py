"""ChatAsymSpec: an AsymSpec drafter/verifier pair as a LangChain chat model.

A thin translator around the framework-neutral `asymspec_agents.chat.AsymSpecChat`: LangChain messages and tools go
in (`messages.to_core_messages`, `to_tool_specs`), the core renders the dual views, decodes (grammar-constrained tool
calls and structured output) and splits text from tool calls; its deltas come back as `AIMessageChunk`s.

There is one output path: `_stream`. `_generate` merges the same chunks, so `invoke`, `stream` and LangGraph's
`stream_mode="messages"` (which routes `invoke` through `_stream`) give identical messages.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from operator import itemgetter
from typing import Any, Callable, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.chat_models import agenerate_from_stream, generate_from_stream
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.output_parsers import JsonOutputKeyToolsParser, JsonOutputParser, PydanticOutputParser, PydanticToolsParser
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass
from pydantic import ConfigDict, Field, PrivateAttr, create_model, model_validator

from asymspec_agents import AsymSpecEngine, GenerationConfig
from asymspec_agents.aio import iterate_in_thread
from asymspec_agents.chat import AsymSpecChat, ChatDelta
from asymspec_agents.context import CompressionPolicy, DualViews
from asymspec_agents.context.tools import check_tool_choice
from asymspec_agents.engine.config import setting_fields
from asymspec_agents.errors import InvalidInputError
from asymspec_agents.models import AUTO, DEFAULT_VERIFIER, context_window, resolve_pair

from .messages import (final_chunk, text_chunk, to_core_messages, to_openai_tools, to_tool_choice, to_tool_specs,
                       tool_call_chunk_of, with_format_instruction, with_later_messages)

# Constructor arguments of hosted chat models (the standard tests pass them); a local pair has no use for them.
REMOTE_ONLY_PARAMS = ("api_key", "base_url", "timeout", "max_retries")
# GenerationConfig's settings as this model's fields (LangChain spells max_new_tokens `max_tokens`; `stop` is
# declared below with LangChain's alias); each is also a per-call keyword (`invoke(..., temperature=0.7)`, `bind`).
RENAMED = {"max_new_tokens": "max_tokens"}
SETTINGS = setting_fields(exclude=("stop",), rename=RENAMED)
CORE_NAME = {ours: core for core, ours in RENAMED.items()}
GenerationSettings = create_model("GenerationSettings", __config__=ConfigDict(arbitrary_types_allowed=True), **{
    name: (kind, Field(default_factory=factory, description=text) if factory else Field(default=default, description=text))
    for name, (kind, default, factory, text) in SETTINGS.items()})
BUNDLED_NAME = "SmolLM2-135M-Instruct"


class ChatAsymSpec(BaseChatModel, GenerationSettings):
    """A drafter that reads the whole conversation and a verifier that reads a compressed memory of it, decoded
    with context-asymmetric speculative decoding, as a LangChain chat model.

        llm = ChatAsymSpec(max_tokens=128)                      # the default pair: bundled-agent, its drafter
        llm = ChatAsymSpec(verifier="bundled")                  # the raw SmolLM2-135M with bundled-small
        llm = ChatAsymSpec(verifier="path/or/hub-id", drafter="small-one", mode="asymmetric", beta=1.0)
        llm = ChatAsymSpec(engine=my_engine)                    # wrap an AsymSpecEngine already built

    Models load on the first call, once per (verifier, drafter) in the process (`AsymSpecEngine.shared`); every
    ChatAsymSpec on the same engine and compression policy shares one dual-view memory, so resending the whole
    history each agent step only compresses and prefills what is new.

    `bind_tools(tools, tool_choice=None|"auto"|"any"|"required"|"none"|<name>)` and `with_structured_output(schema,
    method="json_schema"|"function_calling"|"json_mode")` are grammar-constrained (xgrammar). Each AI message carries
    `usage_metadata` (input = the verifier's compressed view) and `response_metadata["asymspec"]` (speculation stats).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, populate_by_name=True, extra="forbid")

    verifier: str = DEFAULT_VERIFIER
    """The verifier: a hub id, a local folder, a GGUF file, a bundled name ("bundled", the default: SmolLM2-135M-Instruct;
    "bundled-agent": it tuned to decide and call tools), or a vLLM server's "http://host:port/v1"."""
    drafter: str | None = AUTO
    """The drafter (same family, or another one through the vocabulary bridge; a server's URL too). "auto": the
    verifier's matched drafter (the one distilled from a bundled verifier, else the verifier's own weights); None
    allows only modes "full" and "compressed"."""
    tokenizer: str | None = None
    """The pair's tokenizer (hub id or folder), needed only when both models are on servers whose model folders
    this machine cannot read."""
    engine: Any = Field(default=None, exclude=True)
    """An `AsymSpecEngine` to use instead of loading `verifier`/`drafter`."""
    model_name: str | None = Field(default=None, alias="model")
    """The name reported in metadata and traces; derived from the models when not given."""
    stop: list[str] | None = Field(default=None, alias="stop_sequences")
    """Stop strings (any length in tokens); never part of the output."""
    policy: CompressionPolicy | None = None
    """The dual-view memory's `CompressionPolicy`: budgets and compressors of the verifier's view (default:
    `CompressionPolicy()`); `policy=` in LlamaIndex's AsymSpecLLM and AsymSpecChat too."""
    parallel_tool_calls: bool = False
    """Whether one reply may hold several tool calls. Off by default: small models tend to repeat a call once
    they have made it; `bind_tools(..., parallel_tool_calls=True)` turns it on per binding."""
    streaming: bool = False
    """Route `invoke` through streaming (LangChain's convention; the output is the same)."""

    _core: AsymSpecChat | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _drop_remote_params(cls, values: Any) -> Any:
        if isinstance(values, dict):
            values = {key: value for key, value in values.items() if key not in REMOTE_ONLY_PARAMS}
        return values

    @model_validator(mode="after")
    def _check_settings(self) -> "ChatAsymSpec":
        self.generation_config()  # raises ConfigError on out-of-range settings
        return self

    def _resolve_model_profile(self) -> dict:
        """What the pair can do, for middleware that reads `model.profile` (e.g. SummarizationMiddleware's
        fractional triggers): the context window is the smaller of the two models' (read from their configs)."""
        if self.engine is not None:
            window = self.engine.context_window
        else:
            verifier, drafter = resolve_pair(self.verifier, self.drafter)
            window = min(context_window(name) for name in (verifier, drafter) if name is not None)
        return {"max_input_tokens": window, "text_inputs": True, "image_inputs": False, "text_outputs": True,
                "tool_calling": True, "tool_choice": True, "tool_call_streaming": True, "structured_output": True}

    # -----------------------------------------------------------------------------------------------------------
    # LangChain metadata

    @property
    def _llm_type(self) -> str:
        return "asymspec"

    @property
    def resolved_model_name(self) -> str:
        if self.model_name:
            return self.model_name
        if self.engine is not None:
            return getattr(self.engine.verifier.config, "_name_or_path", None) or "asymspec-engine"
        verifier, drafter = resolve_pair(self.verifier, self.drafter)
        verifier, drafter = (BUNDLED_NAME if name == "bundled" else name for name in (verifier, drafter))
        return verifier if drafter in (None, verifier) else f"{verifier}+{drafter}"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.resolved_model_name, "verifier": self.verifier, "drafter": self.drafter,
                **{name: getattr(self, name) for name in SETTINGS if name != "decisions"}}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> dict:
        params = {"ls_provider": "asymspec", "ls_model_name": kwargs.get("model", self.resolved_model_name),
                  "ls_model_type": "chat", "ls_temperature": kwargs.get("temperature", self.temperature),
                  "ls_max_tokens": kwargs.get("max_tokens", self.max_tokens)}
        if stop or self.stop:
            params["ls_stop"] = stop or self.stop
        return params

    # -----------------------------------------------------------------------------------------------------------
    # The core, its settings, and the token counter

    @property
    def core(self) -> AsymSpecChat:
        """The framework-neutral chat turn (loads the models on first use)."""
        if self._core is None:
            engine = (self.engine if self.engine is not None
                      else AsymSpecEngine.shared(self.verifier, self.drafter, tokenizer=self.tokenizer))
            self._core = AsymSpecChat.shared(engine, self.policy)
        return self._core

    def generation_config(self, stop: list[str] | None = None, **overrides: Any) -> GenerationConfig:
        settings = {name: getattr(self, name) for name in SETTINGS} | overrides
        return GenerationConfig(**{CORE_NAME.get(name, name): value for name, value in settings.items()},
                                stop=list(stop if stop is not None else self.stop or []))

    def get_num_tokens_from_messages(self, messages: list[BaseMessage], tools: Sequence | None = None) -> int:
        """Tokens the verifier reads for these messages (the compressed view, chat template included)."""
        return self.core.count_tokens(to_core_messages(messages), to_tool_specs(tools) if tools else None)

    def get_num_tokens(self, text: str) -> int:
        return len(self.core.engine.tokenizer.encode(text, add_special_tokens=False))

    def render_views(self, messages: list[BaseMessage], tools: Sequence | None = None,
                     full_messages: list[BaseMessage] | None = None) -> DualViews:
        """The full and compressed views these messages render to (what the drafter and verifier read);
        with `full_messages`, as a call with that argument renders them."""
        specs = to_tool_specs(tools) if tools else None
        if full_messages is not None:
            full = to_core_messages(with_later_messages(full_messages, messages))
            return self.core.context.render_pair(full, to_core_messages(messages), tools=specs)
        return self.core.context.render(to_core_messages(messages), tools=specs)

    # -----------------------------------------------------------------------------------------------------------
    # Tools and structured output

    def bind_tools(self, tools: Sequence[dict[str, Any] | type | Callable | Any], *,
                   tool_choice: str | dict | bool | None = None, parallel_tool_calls: bool | None = None,
                   **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools; tool calls are constrained to these tools' names and argument schemas.

        tool_choice: None/"auto" (the model decides), "any"/"required" (at least one call), "none" (no tools shown,
        no calls), a tool name (call that tool). parallel_tool_calls=False allows one call per reply."""
        formatted = to_openai_tools(tools)
        choice = to_tool_choice(tool_choice, formatted)
        check_tool_choice(choice, [tool["function"]["name"] for tool in formatted])
        if parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = parallel_tool_calls
        return super().bind(tools=formatted, tool_choice=choice, **kwargs)

    def with_structured_output(self, schema: dict | type | None = None, *, include_raw: bool = False,
                               method: Literal["json_schema", "function_calling", "json_mode"] = "json_schema",
                               strict: bool | None = None, **kwargs: Any) -> Runnable[LanguageModelInput, dict | Any]:
        """Replies parsed into `schema` (Pydantic class, TypedDict, or JSON schema dict).

        Every method is grammar-constrained: "json_schema" and "json_mode" constrain the reply to one JSON value
        of the schema ("json_mode" without a schema: any JSON object); "function_calling" forces one call of a tool
        whose arguments are the schema. `strict` is accepted for compatibility: the grammar is always strict."""
        if kwargs:
            raise InvalidInputError(f"with_structured_output got unknown arguments {sorted(kwargs)}.")
        if method not in ("json_schema", "function_calling", "json_mode"):
            raise InvalidInputError(f"method {method!r} is unknown; use 'json_schema', 'function_calling' or 'json_mode'.")
        if schema is None and method != "json_mode":
            raise InvalidInputError(f"method {method!r} needs a schema; pass one, or use method='json_mode'.")
        is_pydantic = isinstance(schema, type) and is_basemodel_subclass(schema)
        trace = {"kwargs": {"method": method, "strict": strict}, "schema": schema} if schema is not None else None
        if method == "function_calling":
            name = convert_to_openai_tool(schema)["function"]["name"]
            llm = self.bind_tools([schema], tool_choice=name, parallel_tool_calls=False, ls_structured_output_format=trace)
            parser = (PydanticToolsParser(tools=[schema], first_tool_only=True) if is_pydantic
                      else JsonOutputKeyToolsParser(key_name=name, first_tool_only=True))
        else:
            json_schema = convert_to_json_schema(schema) if schema is not None else {"type": "object"}
            llm = self.bind(response_format=json_schema, **({"ls_structured_output_format": trace} if trace else {}))
            parser = PydanticOutputParser(pydantic_object=schema) if is_pydantic else JsonOutputParser()
        if not include_raw:
            return llm | parser
        parse = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
        no_parse = RunnablePassthrough.assign(parsed=lambda _: None)
        return RunnableMap(raw=llm) | parse.with_fallbacks([no_parse], exception_key="parsing_error")

    # -----------------------------------------------------------------------------------------------------------
    # Calls: one sync output path, run off the event loop for async

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return generate_from_stream(self._stream(messages, stop, run_manager, **kwargs))

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        return await agenerate_from_stream(self._astream(messages, stop, run_manager, **kwargs))

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        for chunk in self._chunks(messages, stop, kwargs):
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        async for chunk in iterate_in_thread(lambda: self._chunks(messages, stop, kwargs)):
            if run_manager is not None:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk

    def _chunks(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict) -> Iterator[ChatGenerationChunk]:
        """The core's deltas as LangChain chunks: text, one chunk per completed tool call, then the final chunk."""
        request = self._request(messages, stop, kwargs)
        deltas = self.core.stream(**request)
        calls = 0
        try:
            for delta in deltas:
                for message in self._delta_messages(delta, calls):
                    calls += bool(message.tool_call_chunks)
                    yield ChatGenerationChunk(message=message)
        finally:
            deltas.close()  # an abandoned or cancelled call stops between blocks: the engine's caches stay consistent

    def _delta_messages(self, delta: ChatDelta, calls: int) -> list:
        out = []
        if delta.text:
            out.append(text_chunk(delta.text))
        if delta.tool_call is not None:
            out.append(tool_call_chunk_of(delta.tool_call, calls))
        if delta.reply is not None:
            out.append(final_chunk(delta.reply, self.resolved_model_name))
        return out

    def _request(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict) -> dict:
        """Core request from LangChain's call: bound tools / response format, and per-call setting overrides."""
        kwargs = dict(kwargs)
        tools = kwargs.pop("tools", None)
        tool_choice = kwargs.pop("tool_choice", None)
        parallel = kwargs.pop("parallel_tool_calls", self.parallel_tool_calls)
        response_format = kwargs.pop("response_format", None)
        model = kwargs.pop("model", None)
        full_messages = kwargs.pop("full_messages", None)
        if model is not None and model != self.resolved_model_name:
            raise InvalidInputError(f"model={model!r}: ChatAsymSpec serves {self.resolved_model_name!r} only; build "
                                    "another ChatAsymSpec(verifier=..., drafter=...) for another pair.")
        unknown = sorted(set(kwargs) - set(SETTINGS))
        if unknown:
            raise InvalidInputError(f"Unknown call arguments {unknown}; per-call settings are {', '.join(SETTINGS)}.")
        if response_format is not None and tools:
            raise InvalidInputError("Pass either bound tools or a response format (structured output), not both.")
        core_messages = to_core_messages(messages)
        if response_format is not None:
            core_messages = with_format_instruction(core_messages, response_format)
        full = None
        if full_messages is not None:
            full = to_core_messages(with_later_messages(full_messages, messages))
            if response_format is not None:
                full = with_format_instruction(full, response_format)
        return dict(messages=core_messages, tools=tools, tool_choice=tool_choice,
                    parallel_tool_calls=parallel, response_schema=response_format, full_messages=full,
                    config=self.generation_config(stop, **kwargs))
