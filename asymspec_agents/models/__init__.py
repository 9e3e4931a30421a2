"""Models: loading (hub ids, folders, GGUF, the bundled models, a vLLM server's URL), the vocabulary check, and
drafters made from a verifier's own layers."""

from .loading import (AUTO, BUNDLED, BUNDLED_GEMMA, CACHE_ENV, DEFAULT_VERIFIER, PAIRS,
                      bundled_gemma_gguf_path, bundled_gguf_path, cache_root, config_window, context_window,
                      converted_gguf_dir, load_model, load_tokenizer, merge_adapter, resolve_pair, resolve_source)
from .remote import RemoteModel, RemoteModelError, is_remote, is_url
from .students import layer_subset
from .vocabulary import check_shared_vocabulary

__all__ = ["AUTO", "BUNDLED", "BUNDLED_GEMMA", "CACHE_ENV", "DEFAULT_VERIFIER", "PAIRS", "RemoteModel",
           "RemoteModelError", "bundled_gemma_gguf_path", "bundled_gguf_path", "cache_root", "check_shared_vocabulary",
           "config_window", "context_window", "converted_gguf_dir", "is_remote", "is_url", "layer_subset",
           "load_model", "load_tokenizer", "merge_adapter", "resolve_pair", "resolve_source"]
