"""Token counting: the verifier's tokenizer (budgets) and tiktoken `cl100k_base` (a model-independent unit for reports).

`cl100k_base` is looked up offline first: `TIKTOKEN_CACHE_DIR` if set, else the copy llama-index-core ships in
`llama_index/core/_static/tiktoken_cache` (pointed to by setting `TIKTOKEN_CACHE_DIR`, as llama-index itself does).
Then tiktoken is tried normally (it downloads when online). When it cannot load, cl100k counts are `None` and
`Cl100kCounter.note` says why; nothing else depends on it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import threading
from array import array
from pathlib import Path

from .cache import LRUCache, content_key


class TokenCounter:
    """Encode/count/decode with one tokenizer, without special tokens added; encodings are cached by text.

    The cache is keyed by a digest of the text and stores ids as int32 arrays, so a long-running server holding
    thousands of entries keeps megabytes, not the texts and lists of Python ints.
    """

    def __init__(self, tokenizer, cache_size: int = 8192):
        self.tokenizer = tokenizer
        self._cache = LRUCache(cache_size)

    def encode(self, text: str) -> list[int]:
        return self._encoded(text).tolist()

    def count(self, text: str) -> int:
        return len(self._encoded(text))

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """Uncached batch encoding (the tokenizer's Rust side runs the batch at once)."""
        if not texts:
            return []
        return [list(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _encoded(self, text: str) -> array:
        ids, _ = self._cache.get_or_compute(content_key(text), lambda: array("i", self.tokenizer.encode(text, add_special_tokens=False)))
        return ids


class Cl100kCounter:
    """Counts in tiktoken cl100k_base tokens, or `None` for every text when the encoding is not available."""

    def __init__(self, cache_size: int = 8192):
        self.encoding, self.note = cl100k_encoding()
        self._cache = LRUCache(cache_size)

    @property
    def available(self) -> bool:
        return self.encoding is not None

    def count(self, text: str) -> int | None:
        if self.encoding is None:
            return None
        value, _ = self._cache.get_or_compute(content_key(text), lambda: len(self.encoding.encode(text, disallowed_special=())))
        return value


DOWNLOAD_TIMEOUT_S = 10.0


@functools.cache
def cl100k_encoding():
    """Return `(encoding, None)` or `(None, reason)`. Looked up once per process.

    tiktoken downloads without a timeout; a firewall that drops packets would hang the caller, so the load runs in
    a daemon thread that is abandoned after DOWNLOAD_TIMEOUT_S.
    """
    outcome: dict = {}

    def load():
        try:
            import tiktoken

            outcome["encoding"] = tiktoken.get_encoding("cl100k_base")
        except Exception as exc:  # no file offline and no network, or tiktoken missing
            outcome["error"] = f"{type(exc).__name__}"

    with _tiktoken_cache_of_llama_index():
        thread = threading.Thread(target=load, daemon=True, name="asymspec-cl100k")
        thread.start()
        thread.join(DOWNLOAD_TIMEOUT_S)
    if "encoding" in outcome:
        return outcome["encoding"], None
    reason = outcome.get("error", f"no answer in {DOWNLOAD_TIMEOUT_S:.0f} s")
    return None, (
        f"cl100k_base is not available ({reason}); cl100k counts are None. Install llama-index-core "
        "(it ships the encoding file) or set TIKTOKEN_CACHE_DIR to a folder holding it."
    )


@contextlib.contextmanager
def _tiktoken_cache_of_llama_index():
    """While loading, point tiktoken at the cl100k file llama-index-core ships (unless the user chose a cache);
    the process environment is restored afterwards."""
    folder = None if os.environ.get("TIKTOKEN_CACHE_DIR") else _llama_index_tiktoken_folder()
    if folder is None:
        yield
        return
    os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
    try:
        yield
    finally:
        os.environ.pop("TIKTOKEN_CACHE_DIR", None)


def _llama_index_tiktoken_folder() -> Path | None:
    try:
        spec = importlib.util.find_spec("llama_index.core")  # locates without importing llama_index.core
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "_static" / "tiktoken_cache"
    return folder if folder.is_dir() else None
