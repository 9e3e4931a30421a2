"""AsymSpecQueryEngine: retrieval QA whose retrieved nodes reach the model as passages, not as prompt text.

A stock query engine packs retrieved nodes into one prompt string, so the model cannot tell passages from
instructions and the verifier would read them whole. Here each node becomes a passage of the user turn: the
drafter reads every node whole, the verifier a query-aware compressed form (BM25 selection by default, to the
compression policy's `passage` budget), and AsymSpec decoding carries back what compression cut.

    engine = AsymSpecQueryEngine.from_index(index, llm=AsymSpecLLM(), similarity_top_k=3)
    response = engine.query("What does the nonlocal statement do?")
    response.response, response.source_nodes, response.metadata["full_prompt_tokens"], response.metadata["prompt_tokens"]
"""

from __future__ import annotations

from typing import Any, AsyncGenerator, Generator, Optional, Sequence

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.types import ChatMessage, ChatResponse, MessageRole
from llama_index.core.base.response.schema import RESPONSE_TYPE, AsyncStreamingResponse, Response, StreamingResponse
from llama_index.core.callbacks import CallbackManager
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from asymspec_agents.context import DualViews

from .base import AsymSpecLLM
from .messages import to_core_messages

DEFAULT_SYSTEM_PROMPT = (
    "Answer the question using the documents in the user's message. Quote the relevant facts; if the documents "
    "do not contain the answer, say so."
)


class AsymSpecQueryEngine(BaseQueryEngine):
    """Retrieve, post-process, then one AsymSpecLLM turn with the nodes as passages of the user message.

    `response.metadata` holds the usage (`prompt_tokens`: the verifier's compressed view, `full_prompt_tokens`:
    the drafter's full view, `completion_tokens`), `asymspec_stats` and the `compression` report.
    """

    def __init__(self, retriever: BaseRetriever, llm: AsymSpecLLM, *, system_prompt: str = DEFAULT_SYSTEM_PROMPT,
                 node_postprocessors: Optional[Sequence[BaseNodePostprocessor]] = None, streaming: bool = False,
                 callback_manager: Optional[CallbackManager] = None) -> None:
        if not isinstance(llm, AsymSpecLLM):
            raise TypeError(f"AsymSpecQueryEngine needs an AsymSpecLLM (it hands nodes over as passages), got "
                            f"{type(llm).__name__}; use index.as_query_engine() for other LLMs.")
        self.retriever = retriever
        self.llm = llm
        self.system_prompt = system_prompt
        self.node_postprocessors = list(node_postprocessors or [])
        self.streaming = streaming
        super().__init__(callback_manager or getattr(retriever, "callback_manager", None))

    @classmethod
    def from_index(cls, index: Any, llm: AsymSpecLLM, *, similarity_top_k: int = 4, **kwargs: Any) -> "AsymSpecQueryEngine":
        """From any index with `as_retriever` (VectorStoreIndex, SummaryIndex, ...)."""
        return cls(index.as_retriever(similarity_top_k=similarity_top_k), llm, **kwargs)

    def messages(self, query: str, nodes: Sequence[NodeWithScore]) -> list[ChatMessage]:
        """The conversation the LLM sees: the system prompt, then the question carrying the nodes as passages."""
        return [ChatMessage(role=MessageRole.SYSTEM, content=self.system_prompt),
                ChatMessage(role=MessageRole.USER, content=query, additional_kwargs={"passages": list(nodes)})]

    def views(self, query: str, nodes: Sequence[NodeWithScore]) -> DualViews:
        """Both views of the conversation for `query` and `nodes` (full: the drafter's, comp: the verifier's), as
        the LLM renders them; served from the memory's compression cache after a query."""
        return self.llm.chat_core.context.render(to_core_messages(self.messages(query, nodes)), query=query)

    def retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._postprocess(self.retriever.retrieve(query_bundle), query_bundle)

    async def aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._postprocess(await self.retriever.aretrieve(query_bundle), query_bundle)

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        nodes = self.retrieve(query_bundle)
        messages = self.messages(query_bundle.query_str, nodes)
        if self.streaming:
            metadata: dict = {}  # filled in with usage, stats and compression once the stream is drained
            stream = self.llm.stream_chat(messages, query=query_bundle.query_str)
            return StreamingResponse(response_gen=_deltas(stream, metadata), source_nodes=nodes, metadata=metadata)
        return _response(self.llm.chat(messages, query=query_bundle.query_str), nodes)

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        nodes = await self.aretrieve(query_bundle)
        messages = self.messages(query_bundle.query_str, nodes)
        if self.streaming:
            metadata: dict = {}
            stream = await self.llm.astream_chat(messages, query=query_bundle.query_str)
            return AsyncStreamingResponse(response_gen=_adeltas(stream, metadata), source_nodes=nodes, metadata=metadata)
        return _response(await self.llm.achat(messages, query=query_bundle.query_str), nodes)

    def _postprocess(self, nodes: list[NodeWithScore], query_bundle: QueryBundle) -> list[NodeWithScore]:
        for postprocessor in self.node_postprocessors:
            nodes = postprocessor.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    def _get_prompt_modules(self) -> dict:
        return {}


def _response(chat: ChatResponse, nodes: list[NodeWithScore]) -> Response:
    return Response(response=chat.message.content or "", source_nodes=nodes, metadata=dict(chat.additional_kwargs))


def _deltas(stream: Generator[ChatResponse, None, None], metadata: dict) -> Generator[str, None, None]:
    for response in stream:
        metadata.update(response.additional_kwargs)
        if response.delta:
            yield response.delta


async def _adeltas(stream: AsyncGenerator[ChatResponse, None], metadata: dict) -> AsyncGenerator[str, None]:
    async for response in stream:
        metadata.update(response.additional_kwargs)
        if response.delta:
            yield response.delta
