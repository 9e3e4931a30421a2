"""A bounded, thread-safe LRU cache keyed by content hash.

Frameworks resend the whole history every agent step; this cache makes each item's compression (and each
segment's tokenization) happen once per conversation instead of once per step.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Callable, Hashable, TypeVar

V = TypeVar("V")


class LRUCache:
    """`get_or_compute(key, compute)` returns the cached value or computes, stores and returns it.

    The lock guards the dict only: `compute` runs outside it, so two threads that miss the same key at once both
    compute (same result, stored twice) rather than one blocking every other lookup behind a slow compressor.
    """

    def __init__(self, maxsize: int = 4096):
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._data: OrderedDict[Hashable, object] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_compute(self, key: Hashable, compute: Callable[[], V]) -> tuple[V, bool]:
        """Return `(value, was_cached)`."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                self.hits += 1
                return self._data[key], True
            self.misses += 1
        value = compute()
        self.put(key, value)
        return value, False

    def setdefault(self, key: Hashable, value: V) -> V:
        """Store `value` unless `key` is present; return the stored value (first writer wins)."""
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
            self._store(key, value)
            return value

    def put(self, key: Hashable, value) -> None:
        with self._lock:
            self._store(key, value)

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def _store(self, key, value) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)


def content_key(*parts: object) -> str:
    """A stable hash of the parts (text, settings, budgets): the cache key of one compression."""
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        text = part if isinstance(part, str) else repr(part)
        digest.update(type(part).__name__.encode() + b":" + text.encode("utf-8", "surrogatepass") + b"\x1f")
    return digest.hexdigest()
