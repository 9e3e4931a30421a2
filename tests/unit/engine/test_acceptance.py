"""The two acceptance rules: their formulas on hand-made logits, and the engine against a cache-free reference
decoder (tests/reference_decoder.py) on a tiny pair whose drafter is a cut of the verifier (rejections happen)."""

import math
from dataclasses import replace

import pytest
import torch

import reference_decoder
from sampling_reference import total_variation, two_token_distribution

from asymspec_agents import AsymSpecEngine, ConfigError, GenerationConfig
from asymspec_agents.engine import fusion
from asymspec_agents.engine.acceptance import FusedThreshold, VerifierRatio, Verification
from asymspec_agents.models import layer_subset
from asymspec_agents.testing import tiny_random_model

NEG = float("-inf")


# -- the rules on hand-made logits ---------------------------------------------------------------------------

def verification(target, drafts, base=None, fused=None, proposal=None):
    target = torch.log(torch.tensor(target))
    return Verification(torch.tensor(drafts), target, target if fused is None else torch.log(torch.tensor(fused)),
                        None if base is None else torch.tensor(base),
                        None if proposal is None else torch.tensor(proposal))


def test_ratio_accepts_where_the_verifier_beats_gamma_times_the_compressed_drafter():
    v = verification([[0.2, 0.8], [0.5, 0.5], [0.3, 0.7]], [0, 1, 0], base=[0.3, 0.5, 0.6])
    # 0.2 > 0.5·0.3 yes; 0.5 > 0.5·0.5 yes; 0.3 > 0.5·0.6 = 0.3 no: equality rejects, as in the authors' kernel
    assert VerifierRatio().accept_greedy(v, 0.5).tolist() == [True, True, False]
    assert VerifierRatio().accept_greedy(v, torch.tensor([0.5, 1.0, 0.4])).tolist() == [True, False, True]


def test_ratio_accepts_a_token_the_verifier_alone_would_not_pick_and_fused_does_not():
    v = verification([[0.3, 0.7]], [0], base=[0.4])  # the verifier prefers token 1
    assert VerifierRatio().accept_greedy(v, 0.5).tolist() == [True]
    assert FusedThreshold().accept_greedy(v, 1.0).tolist() == [False]
    assert FusedThreshold().accept_greedy(v, 0.3 / 0.7).tolist() == [True]  # p'(d) ≥ γ·max p' at equality


def test_masked_entries_are_never_accepted_and_never_emitted():
    target = torch.tensor([[0.0, NEG, 1.0]])
    v = Verification(torch.tensor([1]), target, target, torch.tensor([0.5]))
    assert VerifierRatio().accept_greedy(v, 0.5).tolist() == [False]
    assert FusedThreshold().accept_greedy(v, 0.1).tolist() == [False]
    assert VerifierRatio().correction(v, 0, True, torch.Generator()) == 2


def test_corrections_come_from_the_fused_target_greedy_and_sampled():
    v = verification([[0.6, 0.4]], [0], base=[0.9], fused=[[0.1, 0.9]], proposal=[[0.5, 0.5]])
    g = torch.Generator().manual_seed(0)
    assert VerifierRatio().correction(v, 0, True, g) == FusedThreshold().correction(v, 0, True, g) == 1
    draws = [VerifierRatio().correction(v, 0, False, g) for _ in range(2000)]
    assert abs(sum(draws) / len(draws) - 0.9) < 0.03  # a draw from p' itself
    # the fused rule draws from the residual max(0, p' − q) = [0, 0.4] -> always token 1
    assert {FusedThreshold().correction(v, 0, False, g) for _ in range(50)} == {1}


def test_sampled_ratio_accepts_with_probability_min_one_ratio():
    v = verification([[0.2, 0.8], [0.5, 0.5]], [0, 1], base=[0.8, 0.25])
    # ratios 0.2 / (0.5·0.8) = 0.5 and 0.5 / (0.5·0.25) = 4 -> 1
    assert VerifierRatio().accept_sampled(v, 0.5, torch.tensor([0.49, 0.99])).tolist() == [True, True]
    assert VerifierRatio().accept_sampled(v, 0.5, torch.tensor([0.51, 0.99])).tolist() == [False, True]


def test_divergences_follow_their_formulas():
    a = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.0, 0.0]])
    b = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    pa, pb = torch.softmax(a, -1), torch.softmax(b, -1)
    kl = (pa * (pa.log() - pb.log())).sum(-1)
    m = (pa + pb) / 2
    js = 0.5 * (pa * (pa.log() - m.log())).sum(-1) + 0.5 * (pb * (pb.log() - m.log())).sum(-1)
    h = -(pb * pb.log()).sum(-1)
    expected = {"jsd": 2 * js, "kl": 2 * kl, "jsd_pos": js / torch.tensor([1.0, 2.0]),
                "kl_vnorm": kl / math.log(3), "kl_hbase": kl / h}
    for kind, value in expected.items():
        torch.testing.assert_close(fusion.gate_exponent(kind, a, b, lam=2.0), value)
    assert float(fusion.gate_exponent("jsd", a, b)[1]) == 0.0  # identical views: γ_eff = γ
    assert fusion.gated_gamma(0.5, None) == 0.5


def test_divergences_stay_finite_with_masked_entries():
    a = torch.tensor([[0.0, NEG, 1.0]])
    b = torch.tensor([[0.0, 0.5, NEG]])
    js = fusion.gate_exponent("jsd", a, b)
    assert torch.isfinite(js).all() and 0 < float(js) <= math.log(2)
    assert float(fusion.gate_exponent("kl", b, b)) == 0.0


def test_delta_sources():
    t, a, b = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]]), torch.tensor([[0.5, 0.5]])
    ls = lambda x: torch.log_softmax(x, -1)  # noqa: E731
    torch.testing.assert_close(fusion.delta_from("contrast", a, b), ls(a) - ls(b))
    torch.testing.assert_close(fusion.delta_from("full_only", a, b), ls(a))
    torch.testing.assert_close(fusion.delta_from("scd", None, b, t), ls(t) - ls(b))


# -- settings --------------------------------------------------------------------------------------------------

def test_asymmetric_defaults_are_the_papers_with_the_bonus_fused_and_other_modes_stay_exact():
    measured = GenerationConfig().resolved()
    assert (measured.acceptance, measured.beta, measured.gamma, measured.k_max, measured.adaptive_k, measured.cda,
            measured.divergence, measured.cda_lambda, measured.fuse_bonus, measured.delta_source) == (
        "ratio", 1.0, 0.5, 2, False, True, "jsd", 1.0, True, "contrast")
    paper = GenerationConfig(preset="paper").resolved()  # the published rule, one setting away
    assert (paper.acceptance, paper.gamma, paper.k_max, paper.fuse_bonus) == ("ratio", 0.5, 2, False)
    assert GenerationConfig(preset="paper", fuse_bonus=True).resolved().fuse_bonus  # what the user sets stays
    ours = GenerationConfig(acceptance="fused").resolved()
    assert (ours.gamma, ours.k_max, ours.adaptive_k, ours.fuse_bonus) == (1.0, 8, True, True)
    symmetric = replace(GenerationConfig(), mode="symmetric").resolved()  # defaults follow a replaced mode
    assert (symmetric.acceptance, symmetric.gamma, symmetric.k_max) == ("fused", 1.0, 8)
    assert GenerationConfig(gamma=0.7).resolved().gamma == 0.7  # what the user sets stays


@pytest.mark.parametrize("settings, message", [
    (dict(acceptance="strict"), "Unknown acceptance 'strict'"), (dict(divergence="tv"), "Unknown divergence"),
    (dict(delta_source="ours"), "Unknown delta_source"), (dict(cda_lambda=-1.0), "cda_lambda must be >= 0"),
    (dict(gamma=0.0), "gamma must lie in"), (dict(preset="ours"), "Unknown preset .ours.")])
def test_bad_settings_say_what_to_choose(settings, message):
    with pytest.raises(ConfigError, match=message):
        GenerationConfig(**settings)


# -- the engine against the reference decoder --------------------------------------------------------------------

@pytest.fixture(scope="module")
def cut_pair(pair):
    """The verifier and a drafter made of its first layer: it agrees often enough, and is often rejected."""
    verifier = tiny_random_model(len(pair.tokenizer), seed=5, layers=3, logit_std=2.0)
    return verifier, layer_subset(verifier, [0, 2]), pair.tokenizer


def reference(cut_pair, full, comp, config, max_new):
    verifier, drafter, tokenizer = cut_pair
    c = config.resolved()
    return reference_decoder.decode(verifier, drafter, full, comp, acceptance=c.acceptance, max_new_tokens=max_new,
                                    eos_ids={tokenizer.eos_token_id}, beta=c.beta, gamma=c.gamma, k_max=c.k_max,
                                    cda=c.cda, divergence=c.divergence, cda_lambda=c.cda_lambda,
                                    delta_source=c.delta_source, fuse_bonus=c.fuse_bonus, copy_weight=c.copy_weight)


CASES = [dict(acceptance=rule, k_max=k, cda=cda) for rule in ("ratio", "fused") for k in (1, 2, 4) for cda in (True, False)]
CASES += [dict(acceptance="ratio", fuse_bonus=True), dict(acceptance="fused", fuse_bonus=False, gamma=0.6),
          dict(acceptance="ratio", divergence="kl", cda_lambda=0.5), dict(acceptance="ratio", divergence="jsd_pos", k_max=4),
          dict(acceptance="ratio", divergence="kl_vnorm"), dict(acceptance="ratio", divergence="kl_hbase"),
          dict(acceptance="ratio", delta_source="full_only", beta=0.3), dict(acceptance="ratio", delta_source="scd"),
          dict(acceptance="fused", delta_source="scd", beta=0.5)]


@pytest.mark.parametrize("settings", CASES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_engine_equals_the_reference_decoder(cut_pair, views, settings):
    verifier, drafter, tokenizer = cut_pair
    full, comp = views
    # the rules alone: the copy head has its own reference tests (test_copying.py); here, where the prompt repeats
    # itself, it would draft every token right and leave no rejection to check
    config = GenerationConfig(mode="asymmetric", max_new_tokens=24, adaptive_k=False, decisions=None, copy_weight=0.0,
                              **settings)
    result = AsymSpecEngine(verifier, drafter, tokenizer).generate(full, comp, config)
    assert result.token_ids == reference(cut_pair, full, comp, config, 24)
    s = result.stats
    assert 0 < s.accepted < s.drafted  # both outcomes were exercised
    assert s.acceptance == config.acceptance and len(s.block_emissions) == s.blocks


def test_identical_pair_ratio_with_fused_bonus_is_the_ceiling_and_the_papers_bonus_is_not(same_engine, views):
    full, comp = views
    ceiling = same_engine.generate(full, comp, mode="full", max_new_tokens=30)
    fused_bonus = same_engine.generate(full, comp, mode="asymmetric", fuse_bonus=True, max_new_tokens=30, decisions=None,
                                       copy_weight=0.0)  # the drafter is the verifier: no copy head
    assert fused_bonus.token_ids == ceiling.token_ids and fused_bonus.stats.acceptance_rate == 1.0
    paper = same_engine.generate(full, comp, GenerationConfig(max_new_tokens=30, decisions=None, preset="paper"))
    model = same_engine.verifier
    expected = reference_decoder.decode(model, model, full, comp, acceptance="ratio", max_new_tokens=30,
                                        eos_ids=same_engine.eos_token_ids)
    assert paper.token_ids == expected
    assert paper.token_ids != ceiling.token_ids  # every third token is the verifier's own on the compressed view
    assert paper.stats.acceptance_rate == 1.0 and set(paper.stats.block_emissions) == {"verifier"}


def test_stats_say_where_emitted_tokens_came_from(cut_pair, views):
    verifier, drafter, tokenizer = cut_pair
    engine = AsymSpecEngine(verifier, drafter, tokenizer)
    result = engine.generate(*views, GenerationConfig(max_new_tokens=40, beta=2.0, decisions=None, preset="paper"))
    s = result.stats
    assert s.acceptance == "ratio" and set(s.block_emissions) <= {"fused", "verifier", "none"}
    assert s.block_emissions.count("fused") == s.token_sources.count("correction")
    assert s.fusion_changed > 0  # β = 2 overrides the verifier's own choice somewhere
    assert s.accepted_off_verifier_top > 0  # the ratio test lets through tokens the verifier alone would not pick
    assert "block_emissions" in s.to_dict()


def test_multi_turn_reuse_under_the_ratio_rule_equals_a_fresh_engine(cut_pair, views):
    verifier, drafter, tokenizer = cut_pair
    full, comp = views
    engine = AsymSpecEngine(verifier, drafter, tokenizer)
    first = engine.generate(full, comp, max_new_tokens=20, decisions=None)
    turn = tokenizer(" And then?")["input_ids"]
    second = (full + first.token_ids + turn, comp + first.token_ids + turn)
    reused = engine.generate(*second, max_new_tokens=20, decisions=None)
    fresh = AsymSpecEngine(verifier, drafter, tokenizer).generate(*second, max_new_tokens=20, decisions=None)
    assert reused.token_ids == fresh.token_ids
    assert reused.stats.streams["S_full"].reused_tokens >= len(full)


def test_sampled_ratio_with_an_identical_pair_and_fused_bonus_draws_from_the_full_view(same_pair, views):
    """Limiting case of our sampling form: p_V = p_S(·|comp) makes every ratio 1/γ ≥ 1, so every draft (drawn from
    the drafter's full view) is kept and the fused bonus is the full view too."""
    full, comp = views
    engine = AsymSpecEngine(same_pair.verifier, same_pair.drafter, same_pair.tokenizer)
    probs = two_token_distribution(same_pair.verifier, full, 2)
    config = dict(mode="asymmetric", temperature=1.0, top_k=2, max_new_tokens=2, fuse_bonus=True, decisions=None,
                  copy_weight=0.0)
    samples = [tuple(engine.generate(full, comp, GenerationConfig(seed=seed, **config)).token_ids) for seed in range(2000)]
    assert total_variation(samples, probs) < 0.04
    compressed = two_token_distribution(same_pair.verifier, comp, 2)
    assert sum(abs(probs.get(x, 0) - compressed.get(x, 0)) for x in set(probs) | set(compressed)) / 2 > 0.2
