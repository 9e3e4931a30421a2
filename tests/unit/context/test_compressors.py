import re
import zlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asymspec_agents.context import BM25Select, EmbeddingSelect, HeadTail, SurprisalPrune
from asymspec_agents.context.compressors import GAP, drafter_surprisal, join_selected, split_chunks
from asymspec_agents.context.tokens import TokenCounter
from asymspec_agents.errors import ConfigError
from asymspec_agents.testing import tiny_random_pair

LOG = "\n".join(f"2024-05-0{i % 9 + 1} worker-{i} processed batch {i} in {i * 7} ms" for i in range(80))
NEEDLE = "worker-57 processed batch 57"


class BagOfWordsEmbedder:
    """Deterministic stand-in for MiniLM: hashed bag of words, unit length."""

    name = "bow"

    def __call__(self, texts):
        out = np.zeros((len(texts), 256))
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[row, zlib.crc32(word.encode()) % 256] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


@pytest.fixture
def tokens(tok):
    return TokenCounter(tok)


def constant_scorer(ids):
    return np.arange(len(ids), dtype=float)  # later tokens more "surprising"


ALL = [HeadTail(), BM25Select(), EmbeddingSelect(BagOfWordsEmbedder()), SurprisalPrune(constant_scorer)]


@pytest.mark.parametrize("compressor", ALL, ids=lambda c: c.name)
@pytest.mark.parametrize("budget", [16, 40, 200, 1000])
def test_every_compressor_respects_its_budget(compressor, budget, tokens):
    out = compressor(LOG, budget, tokens, query="batch 57")
    assert tokens.count(out) <= budget
    assert out  # something survives


@pytest.mark.parametrize("compressor", ALL, ids=lambda c: c.name)
def test_text_that_fits_is_returned_unchanged(compressor, tokens):
    assert compressor("short text", 64, tokens, query="text") == "short text"


@settings(max_examples=40, deadline=None)
@given(text=st.text(min_size=1, max_size=600), budget=st.integers(16, 300))
def test_budgets_hold_for_arbitrary_unicode(text, budget, tok):
    tokens = TokenCounter(tok)
    for compressor in (HeadTail(), BM25Select(), SurprisalPrune(constant_scorer)):
        assert tokens.count(compressor(text, budget, tokens, query="a b")) <= budget


def test_head_tail_keeps_both_ends_and_says_how_much_was_cut(tokens):
    out = HeadTail(head_fraction=0.5)(LOG, 120, tokens)
    head, marker, tail = re.split(r"\n(\[\.\.\. \d+ tokens cut \.\.\.\])\n", out)
    assert LOG.startswith(head) and LOG.endswith(tail)
    cut = int(re.search(r"\d+", marker).group())
    assert cut == tokens.count(LOG) - (tokens.count(head) + tokens.count(tail))


def test_head_tail_rejects_a_fraction_outside_zero_one():
    with pytest.raises(ConfigError):
        HeadTail(head_fraction=1.5)


def test_bm25_keeps_the_line_the_query_asks_about(tokens):
    out = BM25Select()(LOG, 120, tokens, query="what happened to worker-57 and batch 57?")
    assert NEEDLE in out
    assert GAP in out  # dropped lines are marked
    assert NEEDLE not in HeadTail()(LOG, 120, tokens)  # the needle is in the middle: position alone loses it


def test_bm25_keeps_selected_lines_in_original_order(tokens):
    out = BM25Select()(LOG, 200, tokens, query="batch 12 batch 57 batch 3")
    kept = [line for line in out.split("\n") if line and line != GAP]
    positions = [LOG.split("\n").index(line) for line in kept]
    assert positions == sorted(positions)


def test_bm25_without_a_query_falls_back_to_head_tail(tokens):
    assert BM25Select()(LOG, 100, tokens, query=None) == HeadTail()(LOG, 100, tokens)


def test_embedding_select_keeps_the_chunk_nearest_the_query(tokens):
    out = EmbeddingSelect(BagOfWordsEmbedder())(LOG, 100, tokens, query="worker-57 processed batch 57")
    assert NEEDLE in out


def test_surprisal_prune_keeps_the_most_surprising_tokens_in_order(tokens):
    text = "abcdefghijklmnopqrstuvwxyz" * 4
    surprising = {3, 10, 50, 77, 90}

    def scorer(ids):
        return np.array([5.0 if i in surprising else 0.0 for i in range(len(ids))])

    out = SurprisalPrune(scorer)(text, 16, tokens)
    ids = tokens.encode(text)
    # The first token (always), the five surprising ones, then ties broken by position: 10 more from the start.
    ties = [i for i in range(1, len(ids)) if i not in surprising][:10]
    assert out == tokens.decode([ids[i] for i in sorted({0} | surprising | set(ties))])


def test_surprisal_prune_with_a_drafter_keeps_its_least_predictable_tokens(tok, tokens):
    pair = tiny_random_pair(seed=3)
    text = "The quick brown fox jumps over the lazy dog. " * 3
    out = SurprisalPrune(drafter_surprisal(pair.drafter))(text, 32, tokens)

    ids = tokens.encode(text)
    with torch.no_grad():
        logits = pair.drafter(input_ids=torch.tensor([ids])).logits[0, :-1]  # [n-1, vocab]
    surprisal = -torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
    top = (torch.argsort(surprisal, descending=True, stable=True)[:31] + 1).tolist()
    assert out == tokens.decode([ids[i] for i in sorted([0] + top)])


def test_drafter_surprisal_scores_every_token_across_windows():
    pair = tiny_random_pair(seed=1)
    scores = drafter_surprisal(pair.drafter, window=16)(list(range(3, 43)))
    assert scores.shape == (40,)
    assert np.isinf(scores[[0, 16, 32]]).all() and np.isfinite(np.delete(scores, [0, 16, 32])).all()


@given(st.text(max_size=2000), st.integers(5, 500))
def test_split_chunks_loses_nothing_and_respects_the_size(text, max_chars):
    chunks = split_chunks(text, max_chars)
    assert "".join(chunks) == text
    assert all(len(chunk.rstrip()) <= max_chars or not chunk.strip() or "\n" in chunk for chunk in chunks)


def test_join_selected_marks_each_run_of_dropped_chunks_once():
    chunks = ["a\n", "b\n", "c\n", "d\n", "e\n"]
    assert join_selected(chunks, {1, 4}) == f"{GAP}\nb\n{GAP}\ne\n"
    assert join_selected(chunks, {0, 1}) == f"a\nb\n{GAP}"
