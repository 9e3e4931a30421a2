"""The drafter's copy head (engine/copying.py): its parts on hand-made input, the engine with it against the
reference decoder's own copy head, and the reductions it must keep."""

import math
import random

import pytest
import torch

import reference_decoder

from asymspec_agents import AsymSpecEngine, ConfigError, GenerationConfig
from asymspec_agents.engine.copying import PromptIndex, mix
from asymspec_agents.models import layer_subset
from asymspec_agents.testing import tiny_random_model


def test_the_longest_matching_ngram_decides_what_comes_next():
    index = PromptIndex([1, 2, 3, 4, 9, 2, 3, 4, 5, 7, 3, 4, 5, 6])
    assert index.continuations([0, 2, 3, 4], 4) == {9: 1, 5: 1}  # "2 3 4" twice: both continuations
    assert index.continuations([0, 9, 2, 3, 4], 5) == {5: 1}  # "9 2 3 4" once
    assert index.continuations([8, 3, 4, 5], 4) == {7: 1, 6: 1}
    assert index.continuations([8, 4, 5], 3) is None  # two tokens are too short a match
    assert index.continuations([1, 2, 3, 4, 5], 4) == {9: 1}  # the longest ending before `end`: "1 2 3 4"
    assert index.continuations([1, 2, 3, 4, 5], 4, start=1) == {9: 1, 5: 1}  # "2 3 4": nothing before `start`
    assert index.continuations([1, 2, 3, 4, 5], 4, start=2) is None


def test_mixing_gives_the_weighted_sum_of_both_distributions_and_nothing_without_a_match():
    row = torch.tensor([2.0, 0.0, -1.0, 0.5])
    assert mix(row, None, 0.9) is row
    mixed = mix(row, {2: 3, 3: 1}, 0.8)
    expected = 0.2 * torch.softmax(row, -1) + 0.8 * torch.tensor([0.0, 0.0, 0.75, 0.25])
    torch.testing.assert_close(mixed.exp(), expected)
    assert math.isclose(float(mixed.exp().sum()), 1.0, rel_tol=1e-6)


@pytest.mark.parametrize("weight", [-0.1, 1.0])
def test_a_weight_outside_zero_to_one_is_refused(weight):
    with pytest.raises(ConfigError, match="copy_weight must lie in"):
        GenerationConfig(copy_weight=weight)


@pytest.fixture(scope="module")
def cut_pair(pair):
    verifier = tiny_random_model(len(pair.tokenizer), seed=5, layers=3, logit_std=2.0)
    return verifier, layer_subset(verifier, [0, 2]), pair.tokenizer


@pytest.fixture(scope="module")
def echo_views(cut_pair):
    """A compressed view that ends in the verifier's own greedy continuation of its start (so its reply goes on
    with that continuation, which repeats itself: the copy head finds its n-grams in the prompt), and a full view
    that also holds, before it, a piece of that reply followed by other tokens."""
    verifier, _, tokenizer = cut_pair
    rng = random.Random(3)
    start = [rng.randrange(3, len(tokenizer)) for _ in range(20)]
    own = AsymSpecEngine(verifier, None, tokenizer).generate(start, start, mode="full", max_new_tokens=40,
                                                             decisions=None).token_ids
    comp = start + own[:20]
    other = [rng.randrange(3, len(tokenizer)) for _ in range(10)]
    full = [rng.randrange(3, len(tokenizer)) for _ in range(30)] + own[20:23] + other + comp
    return full, comp


def spy(monkeypatch) -> list:
    """Every continuation the copy head looked up, as it returned them."""
    found, original = [], PromptIndex.continuations
    monkeypatch.setattr(PromptIndex, "continuations", lambda self, *a: found.append(original(self, *a)) or found[-1])
    return found


@pytest.mark.parametrize("acceptance", ["ratio", "fused"])
def test_the_engine_with_a_copy_head_equals_the_reference_decoder(cut_pair, echo_views, acceptance, monkeypatch):
    verifier, drafter, tokenizer = cut_pair
    full, comp = echo_views
    config = GenerationConfig(mode="asymmetric", acceptance=acceptance, max_new_tokens=30, adaptive_k=False,
                              decisions=None, copy_weight=0.9)
    engine = AsymSpecEngine(verifier, drafter, tokenizer)
    found = spy(monkeypatch)
    result = engine.generate(full, comp, config)
    assert any(found)  # the head did propose copies
    c = config.resolved()
    expected = reference_decoder.decode(verifier, drafter, full, comp, acceptance=acceptance, max_new_tokens=30,
                                        eos_ids={tokenizer.eos_token_id}, beta=c.beta, gamma=c.gamma, k_max=c.k_max,
                                        cda=c.cda, fuse_bonus=c.fuse_bonus, copy_weight=0.9)
    assert result.token_ids == expected
    assert result.token_ids != engine.generate(full, comp, config, copy_weight=0.0).token_ids  # and they mattered


def test_with_exact_verification_the_copy_head_changes_no_token(cut_pair, echo_views, monkeypatch):
    """γ = 1, β = 0 (the symmetric modes) is exact speculative decoding: the reply is the verifier's own, whatever
    the copy head drafts; it changes only what is drafted and kept."""
    verifier, drafter, tokenizer = cut_pair
    full, comp = echo_views
    engine = AsymSpecEngine(verifier, drafter, tokenizer)
    alone = engine.generate(full, comp, mode="compressed", max_new_tokens=24, decisions=None)
    found = spy(monkeypatch)
    with_head = engine.generate(full, comp, mode="symmetric", max_new_tokens=24, decisions=None, copy_weight=0.9)
    assert with_head.token_ids == alone.token_ids
    assert any(found)
    without = engine.generate(full, comp, mode="symmetric", max_new_tokens=24, decisions=None, copy_weight=0.0)
    assert with_head.stats.accepted > without.stats.accepted  # the copies were right: more drafts kept
