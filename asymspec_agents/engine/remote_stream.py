"""A stream whose model is on a server (models/remote.py): the same contract as a local `KVStream`.

It holds only the ids the server has "read"; every forward sends them whole and the server's prefix cache makes
that cheap. A forward of k+1 rows is one batched scoring request. A forward of one row that the caller says will
be followed by single-token forwards (`ahead`: the drafter drafting, the verifier decoding alone) is one greedy
generation request whose tokens and rows are kept: while the caller feeds those same tokens, the next rows come
from it without a request; any other token (a grammar mask, a sampled draft, a rejection) drops them.
"""

from __future__ import annotations

import time

import torch

from ..models.remote import MAX_TOKEN_IDS, RemoteModel, dense_row
from .stats import StreamStats
from .streams import common_prefix

MAX_LOOKAHEAD = 32  # tokens one generation request may draft ahead of the caller
MAX_FILL_IN = 128  # tokens per row whose exact values a block may ask a server for (the highest bounds first)


class RemoteStream:
    def __init__(self, remote: RemoteModel, role: str, view: str, vocab_size: int):
        self.model, self.role, self.view, self.vocab_size = remote, role, view, vocab_size
        self.device = torch.device("cpu")
        self.ids: list[int] = []
        self.stats = StreamStats(role, view)
        self._ahead: list[tuple[int, dict]] = []  # (token the server chose next, the row after it), in order
        self._planned = 0  # single-token forwards the caller announced and has not made yet
        self._scored: tuple[list[int], list[dict]] | None = None  # the last forward's prefix lengths and rows

    concurrent = True  # its forwards wait on a server: the loop may run them beside another stream's

    @property
    def name(self) -> str:
        return f"{'S' if self.role == 'drafter' else 'V'}_{self.view}"

    @property
    def nbytes(self) -> int:
        return 8 * len(self.ids)  # what the pool's budget counts: ids only, the keys and values live on the server

    def bytes_for(self, tokens: int) -> int:
        return 8 * tokens

    def __len__(self) -> int:
        return len(self.ids)

    def start_call(self) -> None:
        self.stats = StreamStats(self.role, self.view)

    def sync(self, prompt: list[int], donors=()) -> None:
        keep = common_prefix(self.ids, prompt[:-1])
        self.rollback(keep)
        self.stats.reused_tokens += keep
        self.stats.prefill_tokens += len(prompt) - 1 - keep  # read by the server with the next forward
        self.ids = list(prompt[:-1])

    def forward(self, tokens: list[int], keep: int | None = None, *, ahead: int = 0) -> torch.Tensor:
        """Feed tokens; `[keep, vocab]` log-probabilities after the last `keep` of them. `ahead`: how many
        single-token forwards will likely follow this one (a row from a lookahead counts none)."""
        keep = len(tokens) if keep is None else min(keep, len(tokens))
        started = time.perf_counter()
        self._planned = ahead or max(self._planned - 1, 0)
        if keep == 1 and self._ahead and [token for token, _ in self._ahead[:len(tokens)]] == list(tokens):
            entries = [self._ahead[len(tokens) - 1][1]]  # the server computed this forward already
            del self._ahead[:len(tokens)]
            self.stats.lookahead_rows += 1
        else:
            self._ahead = []
            entries = self._request(self.ids + list(tokens), keep)
        self.ids.extend(tokens)  # only once the server answered: a failed call leaves the stream as it was
        self._scored = (list(range(len(self.ids) - keep + 1, len(self.ids) + 1)), entries)
        s = self.stats
        s.decode_tokens += len(tokens)
        s.decode_forwards += 1
        s.decode_sizes[len(tokens)] += 1
        s.seconds += time.perf_counter() - started
        return torch.stack([dense_row(row, self.vocab_size, self._top_n) for row in entries])

    def exact(self, rows: torch.Tensor, wanted: dict[int, list[int]]) -> None:
        """Make rows of the last forward (`rows`, as it returned them) exact at the wanted tokens (row index ->
        token ids), in place: one request on the same, cached, prefixes."""
        ends, entries = self._scored or ([], [])
        wanted = {j: [t for t in tokens if t not in entries[j]] for j, tokens in wanted.items() if j < len(ends)}
        wanted = {j: tokens for j, tokens in wanted.items() if tokens and ends[j] <= len(self.ids)}
        if not wanted:
            return
        started = time.perf_counter()
        tokens = sorted({t for ts in wanted.values() for t in ts})
        fetched = self.model.token_rows([self.ids[:ends[j]] for j in wanted], tokens)
        for j, exact in zip(wanted, fetched):
            entries[j].update(exact)
            rows[j] = dense_row(entries[j], self.vocab_size, self._top_n)
        chunks = -(-len(tokens) // MAX_TOKEN_IDS)
        self.stats.requests += chunks
        self.stats.fill_ins += chunks
        self.stats.seconds += time.perf_counter() - started

    @property
    def _top_n(self) -> int | None:
        return self.model.top_logprobs if self.model.top_logprobs > 0 else None

    def unreturned(self, rows: torch.Tensor) -> torch.Tensor:
        """`[n, vocab]` bool: the entries `dense_row` filled with the spread of the leftover mass (the one value
        most of a row shares; a token a later request made exact holds its own value)."""
        fill = rows.mode(dim=-1, keepdim=True).values
        spread = rows == fill
        return spread & (spread.sum(dim=-1, keepdim=True) > 1)

    def floors(self, rows: torch.Tensor) -> torch.Tensor:
        """`[n, 1]`: each row's N-th largest value, the most a token outside the server's top N can have."""
        return rows.topk(min(self._top_n or rows.shape[-1], rows.shape[-1]), dim=-1).values[..., -1:]

    def rollback(self, length: int) -> None:
        if length > len(self.ids):
            raise RuntimeError(f"{self.name} holds {len(self.ids)} tokens, cannot roll back to {length}")
        if length < len(self.ids):
            self._ahead, self._scored = [], None  # they continued what is now cut
            del self.ids[length:]

    def copy_prefix(self, donor, length: int) -> None:
        self.ids = list(donor.ids[:length])

    def reset(self) -> None:
        self.ids, self._ahead, self._scored = [], [], None

    def _request(self, ids: list[int], keep: int) -> list[dict]:
        self.stats.requests += 1
        if keep == 1 and self._planned:
            tokens, rows = self.model.generate(ids, 1 + min(self._planned, MAX_LOOKAHEAD))
            self._ahead = list(zip(tokens, rows[1:]))
            return rows[:1]
        rows = self.model.rows(ids, keep)
        ends = range(len(ids) - keep + 1, len(ids))  # rows whose next token is known: a draft
        missing = [(j, ids[end]) for j, end in enumerate(ends) if ids[end] not in rows[j]]
        if missing:  # a draft outside the top N: its own log-probability, on the same cached prefixes
            self.stats.requests += 1
            self.stats.fill_ins += 1
            extra = self.model.token_rows([ids[:ends[j]] for j, _ in missing], sorted({t for _, t in missing}))
            for (j, _), entries in zip(missing, extra):
                rows[j].update(entries)
        return rows


class WholeRows:
    """Every row the streams return is exact (local models, or servers sending whole rows): nothing to settle."""

    def settle(self, t_rows, b_rows, a, rows, delta) -> None:
        pass

    def read(self, name: str, log_p: torch.Tensor) -> torch.Tensor:
        return log_p


class TruncatedRows:
    """Rows a vLLM server truncated to its top N (remote.py), where the loop reads them.

    `read`: δ reads a token a server's row did not return at the row's bound, the most it can have, not at the
    spread estimate: ~1e-6 for a token just outside the drafter's top 200 made δ ≈ 6 and flipped a choice; at the
    bound both rows of a difference err towards δ = 0.

    `settle`: a token the verifier's server did not return has t ≤ t_N, so it can beat the best exactly known
    t + β·δ only if t_N + β·δ does; fetch the exact t (and b) of every such token, in place, so that greedy choices
    on t + β·δ are those of whole rows (given δ, exact with a local drafter)."""

    def __init__(self, streams: dict[str, object], beta: float, settles: bool):
        self.streams = streams  # "target", "full", "comp" -> the verifier's and the drafter's streams (or None)
        self.beta, self.settles = beta, settles  # settling matters only to greedy choices on t + β·δ

    def read(self, name: str, log_p: torch.Tensor) -> torch.Tensor:
        stream = self.streams[name]
        if not isinstance(stream, RemoteStream):
            return log_p
        return torch.where(stream.unreturned(log_p), stream.floors(log_p), log_p)

    def settle(self, t_rows: torch.Tensor, b_rows: torch.Tensor | None, a: torch.Tensor | None, rows: list[int],
               delta) -> None:
        """Make `t_rows[rows]` (and `b_rows[rows]`) exact wherever an unreturned token could win; `delta(t, a, b)`
        is the loop's δ at those rows."""
        verify, contrast = self.streams["target"], self.streams["comp"]
        if not self.settles or b_rows is None or not isinstance(verify, RemoteStream):
            return
        t = t_rows[rows]
        exact = ~verify.unreturned(t)
        d = delta(t, a, b_rows[rows])
        best = (t + self.beta * d).masked_fill(~exact, float("-inf")).amax(-1, keepdim=True)
        reach = (verify.floors(t) + self.beta * d).masked_fill(exact, float("-inf"))
        wanted = {}
        for i, row in enumerate(rows):
            top = reach[i].topk(min(MAX_FILL_IN, reach.shape[-1]))
            tokens = top.indices[top.values > best[i]].tolist()
            if tokens:
                wanted[row] = tokens
        if wanted:
            verify.exact(t_rows, wanted)
            if isinstance(contrast, RemoteStream):
                contrast.exact(b_rows, wanted)


def row_reader(verify, draft, contrast, *, beta: float, settles: bool) -> WholeRows | TruncatedRows:
    """How the loop reads this call's rows: as they are, unless a stream is on a server."""
    streams = {"target": verify, "full": draft, "comp": contrast}
    if any(isinstance(stream, RemoteStream) for stream in streams.values()):
        return TruncatedRows(streams, beta, settles)
    return WholeRows()
