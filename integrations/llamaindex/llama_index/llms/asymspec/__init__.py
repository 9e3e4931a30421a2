"""asymspec-agents for LlamaIndex: `AsymSpecLLM` (a FunctionCallingLLM) and `AsymSpecQueryEngine` (retrieved nodes
reach the drafter whole and the verifier compressed)."""

from llama_index.llms.asymspec.base import AsymSpecLLM
from llama_index.llms.asymspec.query_engine import AsymSpecQueryEngine

__all__ = ["AsymSpecLLM", "AsymSpecQueryEngine"]
