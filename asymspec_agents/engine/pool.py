"""A pool of KV stream sets: one set per live conversation, so conversations that alternate keep their caches.

A call names the prompt each stream would read. The pool hands it the set that *continues* (some stream of the
set held exactly this prompt's beginning at its last call: the same conversation, one step later), and the
longest-matching one among those. A call that continues no set *branches*: a new set starts from a copy of the
longest prefix any set shares with it (a common system prompt and tools block, a fan-out's shared history) and
prefills the rest.

The budget holds during calls too. A call reserves the bytes its streams will hold at its prompt plus its new
tokens; it starts once the reservations of the calls in progress leave room for it (least recently used idle sets
are evicted to make that room), and otherwise waits, first come first served, for calls to end, at most
`room_wait` seconds (then CacheBudgetError: the server answers 503). A call with no other call in progress always
starts, so the pool holds at most its budget or one conversation's caches, whichever is larger.

A call may name a `scope` (a tenant): it then continues, and copies prefixes from, only the sets of its own scope,
so whether another tenant sent a prompt before never shows in its time or its cached tokens.

A set serves one call at a time; a call continuing a busy set waits for it, then chooses again (the set has
moved on by one reply: parallel branches of one history end up in sets of their own). Two streams of one
conversation consumed in turn by one thread would therefore wait for each other: consume them one after another.
Local forwards of all sets take turns under the engine's compute lock (engine.py).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..errors import CacheBudgetError
from .streams import Stream, common_prefix

StreamKey = tuple[str, str]  # (role, view)

DEFAULT_KV_BUDGET = 4 << 30  # bytes of keys and values the pool keeps (one SmolLM2 token: 46 KB a stream)
ROOM_WAIT_SECONDS = 60.0  # how long a call waits for calls in progress to leave room in the budget

CONTINUED, BRANCHED, FRESH = "continued", "branched", "fresh"


@dataclass
class PoolStats:
    calls: int = 0
    continued: int = 0  # calls served by the set of their own conversation (a cache hit)
    branched: int = 0  # calls that started a set from another set's shared prefix
    fresh: int = 0  # calls that shared nothing with any set
    evictions: int = 0
    sets: int = 0
    busy: int = 0  # sets serving a call right now
    waiting: int = 0  # calls waiting for room in the budget
    kv_bytes: int = 0
    largest_set_bytes: int = 0  # one conversation's caches, the largest
    budget_bytes: int = 0

    @property
    def hit_rate(self) -> float:
        return self.continued / self.calls if self.calls else 0.0


class StreamSet:
    """The KV streams of one conversation, and the prompt length each held at its last call."""

    _ids = itertools.count()

    def __init__(self, make_stream: Callable[[str, str], Stream], scope: str | None = None):
        self.id = next(self._ids)
        self.scope = scope  # the tenant whose calls may use this set (None: calls that name no scope)
        self.streams: dict[StreamKey, Stream] = {}
        # prompt tokens of the last call that read the stream (unknown: all it holds, e.g. a copied prefix)
        self.anchors: dict[StreamKey, int] = {}
        self.busy = False
        self.reserved = 0  # bytes its call in progress may grow to
        self.last_used = 0
        self._make_stream = make_stream

    def stream(self, role: str, view: str) -> Stream:
        key = (role, view)
        if key not in self.streams:
            self.streams[key] = self._make_stream(role, view)
        return self.streams[key]

    def kv_bytes(self) -> int:
        return sum(stream.nbytes for stream in self.streams.values())

    def held(self) -> int:
        """Bytes the budget counts for it: what its call reserved while one is in progress."""
        return max(self.reserved, self.kv_bytes()) if self.busy else self.kv_bytes()

    def match(self, prompts: dict[StreamKey, list[int]]) -> tuple[int, bool]:
        """(cached prompt tokens this call could reuse, whether the call continues this set's conversation)."""
        reach, continues = 0, False
        for key, prompt in prompts.items():
            stream = self.streams.get(key)
            if stream is None or not stream.ids:
                continue
            shared = common_prefix(stream.ids, prompt[:-1])
            reach += shared
            continues |= shared > 0 and shared >= self.anchors.get(key, len(stream.ids))
        return reach, continues


class CachePool:
    def __init__(self, make_stream: Callable[[str, str], Stream], budget_bytes: int = DEFAULT_KV_BUDGET,
                 room_wait: float = ROOM_WAIT_SECONDS):
        self._make_stream = make_stream
        self.budget_bytes = int(budget_bytes)
        self.room_wait = room_wait
        self._sets: list[StreamSet] = []
        self._waiting: deque[object] = deque()  # calls waiting for room, in order of arrival
        self._changed = threading.Condition()
        self._clock = itertools.count(1)
        self._stats = PoolStats(budget_bytes=self.budget_bytes)

    @contextmanager
    def acquire(self, prompts: dict[StreamKey, list[int]], used: set[StreamKey], scope: str | None = None,
                new_tokens: int = 0) -> Iterator[tuple[StreamSet, str]]:
        """The set this call should use, held for the call, and how it was found (CONTINUED, BRANCHED, FRESH).

        `prompts`: (role, view) -> the prompt ids that stream would read, for every stream whose prompt is known;
        `used`: the streams the call reads (a branch copies only theirs); `scope`: the tenant, whose calls share
        only sets of their own; `new_tokens`: the most tokens the call adds to each stream after its prompt."""
        chosen, how = self._choose(prompts, used, scope, new_tokens)
        try:
            yield chosen, how
        finally:
            with self._changed:
                for key in used:
                    stream, prompt = chosen.streams.get(key), prompts[key]
                    if stream is not None and common_prefix(stream.ids, prompt[:-1]) == len(prompt) - 1:
                        chosen.anchors[key] = len(prompt) - 1
                chosen.busy, chosen.reserved = False, 0
                chosen.last_used = next(self._clock)
                self._evict(keep=chosen)
                self._changed.notify_all()

    def clear(self) -> None:
        """Forget every set; a call in progress finishes on its own set, which is then gone."""
        with self._changed:
            self._sets = []
            self._changed.notify_all()

    @property
    def stats(self) -> PoolStats:
        with self._changed:
            self._stats.sets = len(self._sets)
            self._stats.busy = sum(s.busy for s in self._sets)
            self._stats.waiting = len(self._waiting)
            sizes = [s.kv_bytes() for s in self._sets]
            self._stats.kv_bytes, self._stats.largest_set_bytes = sum(sizes), max(sizes, default=0)
            return PoolStats(**vars(self._stats))

    def _choose(self, prompts: dict[StreamKey, list[int]], used: set[StreamKey], scope: str | None,
                new_tokens: int) -> tuple[StreamSet, str]:
        ticket, give_up = object(), time.monotonic() + self.room_wait
        with self._changed:
            try:
                while True:
                    best, how, donor = self._candidate(prompts, scope)
                    if best is None:  # its conversation is mid-call: once it ends, this call may branch off it
                        self._changed.wait()
                        continue
                    need = sum(max(stream.nbytes, stream.bytes_for(len(prompts[key]) + new_tokens))
                               for key in used for stream in [best.stream(*key)])
                    if self._admits(best, need, ticket):
                        break
                    if ticket not in self._waiting:
                        self._waiting.append(ticket)
                    if not self._changed.wait(max(0.0, give_up - time.monotonic())):
                        raise CacheBudgetError(
                            f"This call's KV cache ({need / 2**20:.1f} MiB) found no room in the cache pool's budget "
                            f"({self.budget_bytes / 2**20:.1f} MiB) within {self.room_wait:g} s: the calls in "
                            "progress hold it. Retry, or give the engine a larger kv_budget (asymspec serve "
                            "--kv-budget-gib).")
            finally:
                if ticket in self._waiting:
                    self._waiting.remove(ticket)
                    self._changed.notify_all()  # the next in line may go now
            best.busy, best.reserved = True, need
            if how == BRANCHED:
                for role, view in used:
                    source = donor.streams.get((role, view))
                    if source is not None:
                        shared = common_prefix(source.ids, prompts[role, view][:-1])
                        best.stream(role, view).copy_prefix(source, shared)
            if how != CONTINUED:
                self._sets.append(best)
            self._evict(keep=best)  # idle sets go while the pool, this call's reservation counted, is over budget
            self._stats.calls += 1
            setattr(self._stats, how, getattr(self._stats, how) + 1)
            return best, how

    def _candidate(self, prompts: dict[StreamKey, list[int]], scope: str | None
                   ) -> tuple[StreamSet | None, str, StreamSet | None]:
        """(the set to use, how it was found, the set a new one copies its prefix from); no set while the one it
        continues is busy."""
        scored = [(s, *s.match(prompts)) for s in self._sets if s.scope == scope]
        continuing = [(reach, s) for s, reach, continues in scored if continues]
        if continuing:
            _, best = max(continuing, key=lambda pair: (pair[0], pair[1].last_used))
            return (None if best.busy else best), CONTINUED, None
        # a busy set's caches are being written: copy from idle ones only (never wait for a prefix)
        donors = [(reach, s) for s, reach, _ in scored if reach > 0 and not s.busy]
        donor = max(donors, key=lambda pair: (pair[0], pair[1].last_used))[1] if donors else None
        return StreamSet(self._make_stream, scope), (BRANCHED if donor is not None else FRESH), donor

    def _admits(self, chosen: StreamSet, need: int, ticket: object) -> bool:
        """Whether a call needing `need` bytes may start on `chosen` now: first in line, and alone or within the
        budget beside the calls in progress (idle sets make room)."""
        if self._waiting and self._waiting[0] is not ticket:
            return False
        others = [s for s in self._sets if s.busy and s is not chosen]
        return not others or sum(s.held() for s in others) + need <= self.budget_bytes

    def _evict(self, keep: StreamSet | None = None) -> None:
        """Drop least recently used idle sets while the pool is over budget (busy sets count what their calls
        reserved; the set just used stays)."""
        total = sum(s.held() for s in self._sets)
        for victim in sorted((s for s in self._sets if not s.busy and s is not keep), key=lambda s: s.last_used):
            if total <= self.budget_bytes:
                break
            total -= victim.kv_bytes()
            self._sets.remove(victim)
            self._stats.evictions += 1
