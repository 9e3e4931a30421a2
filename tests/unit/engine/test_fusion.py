"""Hand-made logits with known answers for fusion, JSD, the gate, acceptance and residual sampling."""

import math

import pytest
import torch

from asymspec_agents.engine import fusion
from asymspec_agents.engine.acceptance import FusedThreshold, Verification, leading_accepts

RULE = FusedThreshold()  # the fused rule's formulas (the ratio rule's are in test_acceptance.py)


def accept_greedy(fused, drafts, gamma_eff):
    return RULE.accept_greedy(Verification(drafts, fused, fused), gamma_eff)


def accept_sampling(p, q, drafts, gamma_eff, uniforms):
    return RULE.accept_sampled(Verification(drafts, p.log(), p.log(), proposal=q), gamma_eff, uniforms)


def test_delta_is_difference_of_log_softmax_and_ignores_constant_shifts():
    a = torch.tensor([[2.0, 0.0, -1.0]])
    b = torch.tensor([[0.0, 0.0, 0.0]])
    expected = torch.log_softmax(a, -1) - math.log(1 / 3)
    assert torch.allclose(fusion.delta_from("contrast", a, b), expected)
    assert torch.allclose(fusion.delta_from("contrast", a + 5.0, b - 3.0), expected)


def test_fuse_adds_beta_times_delta_and_beta_zero_returns_target_untouched():
    t = torch.tensor([[1.0, 2.0, 3.0]])
    d = torch.tensor([[0.5, -0.5, 0.0]])
    assert torch.equal(fusion.fuse(t, d, 2.0), torch.tensor([[2.0, 1.0, 3.0]]))
    assert fusion.fuse(t, d, 0.0) is t


def test_jsd_is_zero_for_equal_and_ln2_for_disjoint_distributions():
    same = torch.tensor([[1.0, 2.0, 3.0]])
    assert fusion.jsd(same, same).item() == pytest.approx(0.0, abs=1e-7)
    disjoint_a = torch.tensor([[0.0, -torch.inf]])
    disjoint_b = torch.tensor([[-torch.inf, 0.0]])
    assert fusion.jsd(disjoint_a, disjoint_b).item() == pytest.approx(math.log(2), abs=1e-6)


def test_jsd_matches_a_hand_computed_value():
    p = torch.tensor([0.5, 0.5])
    q = torch.tensor([0.9, 0.1])
    m = (p + q) / 2
    expected = 0.5 * (p * (p / m).log()).sum() + 0.5 * (q * (q / m).log()).sum()
    assert fusion.jsd(p.log()[None], q.log()[None]).item() == pytest.approx(expected.item(), rel=1e-5)


def test_gate_lowers_gamma_by_exp_of_minus_divergence():
    d = torch.tensor([0.0, math.log(2)])
    gated = fusion.gated_gamma(0.8, d)
    assert torch.allclose(gated, torch.tensor([0.8, 0.4]))
    assert fusion.gated_gamma(0.8, None) == 0.8


def test_greedy_acceptance_compares_against_gamma_times_the_best_probability():
    # p' = [0.5, 0.3, 0.2]
    target = torch.tensor([[0.5, 0.3, 0.2]]).log()
    drafts = torch.tensor([1])
    assert not accept_greedy(target, drafts, 1.0).item()
    assert accept_greedy(target, drafts, 0.6).item()  # 0.3 >= 0.6 * 0.5
    assert not accept_greedy(target, drafts, 0.61).item()
    assert accept_greedy(target, torch.tensor([0]), 1.0).item()


def test_sampling_acceptance_uses_min_one_p_over_gamma_q():
    p = torch.tensor([[0.2, 0.8], [0.6, 0.4]])
    q = torch.tensor([[0.5, 0.5], [0.3, 0.7]])
    drafts = torch.tensor([0, 0])
    # ratios: 0.2/0.5 = 0.4 ; 0.6/0.3 -> clamp 1
    assert accept_sampling(p, q, drafts, 1.0, torch.tensor([0.39, 0.999])).tolist() == [True, True]
    assert accept_sampling(p, q, drafts, 1.0, torch.tensor([0.41, 0.5])).tolist() == [False, True]
    # γ = 0.5 doubles the ratio: 0.8
    assert accept_sampling(p, q, drafts, 0.5, torch.tensor([0.79, 0.5])).tolist() == [True, True]


def test_residual_is_normalized_positive_part_or_p_when_empty():
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.7, 0.1, 0.2])
    assert torch.allclose(fusion.residual(p, q), torch.tensor([0.0, 1.0, 0.0]))
    assert torch.allclose(fusion.residual(p, p), p)


def test_rejection_sampling_with_residual_reproduces_the_target_distribution():
    """Vectorized over many draws: accepted drafts plus residual corrections are distributed as p."""
    generator = torch.Generator().manual_seed(0)
    p = torch.tensor([0.1, 0.2, 0.3, 0.4])
    q = torch.tensor([0.4, 0.3, 0.2, 0.1])
    n = 200_000
    drafts = torch.multinomial(q, n, replacement=True, generator=generator)
    accepted = accept_sampling(p.expand(n, 4), q.expand(n, 4), drafts, 1.0, torch.rand(n, generator=generator))
    corrections = torch.multinomial(fusion.residual(p, q), n, replacement=True, generator=generator)
    tokens = torch.where(accepted, drafts, corrections)
    empirical = torch.bincount(tokens, minlength=4).float() / n
    assert (empirical - p).abs().sum().item() / 2 < 0.005
    # sampling from q itself would be far off: the test can fail
    assert (q - p).abs().sum().item() / 2 > 0.25


def test_process_applies_temperature_top_k_and_top_p():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0]])
    assert torch.equal(fusion.process(logits, 0.0, 1, 0.1), logits)  # greedy leaves logits alone
    assert torch.allclose(fusion.process(logits, 2.0), logits / 2)
    top2 = fusion.process(logits, 1.0, top_k=2)
    assert torch.isinf(top2[0, 2:]).all() and torch.isfinite(top2[0, :2]).all()
    probs = torch.softmax(logits, -1)[0]  # [0.644, 0.237, 0.087, 0.032]
    kept = torch.isfinite(fusion.process(logits, 1.0, top_p=0.8))[0].tolist()
    assert kept == [True, True, False, False]
    assert probs[0] < 0.8 < probs[0] + probs[1]
    assert torch.isfinite(fusion.process(logits, 1.0, top_p=0.5))[0].tolist() == [True, False, False, False]


def test_leading_accepts_counts_until_first_rejection():
    assert leading_accepts(torch.tensor([True, True, False, True])) == 2
    assert leading_accepts(torch.tensor([True, True])) == 2
    assert leading_accepts(torch.tensor([False, True])) == 0


def test_entropy_of_uniform_and_of_a_masked_distribution():
    assert fusion.entropy(torch.zeros(1, 4)).item() == pytest.approx(math.log(4))
    masked = torch.tensor([[0.0, 0.0, -torch.inf]])
    assert fusion.entropy(masked).item() == pytest.approx(math.log(2))
