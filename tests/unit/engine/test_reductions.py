"""docs/design.md §5 reductions on tiny random models: each special case equals the system it reduces to."""

import pytest

from asymspec_agents import GenerationConfig

N = 40


def run(engine, views, **settings):
    full, comp = views
    return engine.generate(full, comp, GenerationConfig(max_new_tokens=N, **settings))


@pytest.mark.parametrize("k_max", [1, 4, 8])
def test_beta_zero_gate_off_equals_compressed_greedy(engine, views, k_max):
    floor = run(engine, views, mode="compressed")
    fused = run(engine, views, mode="asymmetric", beta=0.0, cda=False, acceptance="fused", gamma=1.0, k_max=k_max)
    assert fused.token_ids == floor.token_ids
    assert fused.stats.drafted > 0  # speculation really ran


@pytest.mark.parametrize("rule", [dict(acceptance="fused"), dict(acceptance="ratio", fuse_bonus=True)])
def test_identical_drafter_beta_one_equals_full_greedy_with_full_acceptance(same_engine, views, rule):
    """The drafter is the verifier's own weights and nothing else: its copy head off (with it, it is another model)."""
    ceiling = run(same_engine, views, mode="full")
    fused = run(same_engine, views, mode="asymmetric", beta=1.0, cda=True, k_max=8, copy_weight=0.0, **rule)
    assert fused.token_ids == ceiling.token_ids
    assert fused.stats.acceptance_rate == 1.0
    assert fused.stats.drafted >= N // 2


@pytest.mark.parametrize("mode, reference", [("symmetric", "compressed"), ("symmetric_full", "full")])
def test_symmetric_modes_are_lossless_with_same_and_random_drafters(engine, same_engine, views, mode, reference):
    same_ref = run(same_engine, views, mode=reference)
    same = run(same_engine, views, mode=mode)
    assert same.token_ids == same_ref.token_ids
    assert same.stats.acceptance_rate == 1.0

    random_ref = run(engine, views, mode=reference)
    random = run(engine, views, mode=mode)
    assert random.token_ids == random_ref.token_ids
    assert random.stats.acceptance_rate < 0.2


def test_asymmetric_with_random_drafter_and_beta_changes_the_output(engine, views):
    """δ-fusion must actually act when β > 0 (otherwise the reductions above prove nothing)."""
    floor = run(engine, views, mode="compressed")
    fused = run(engine, views, mode="asymmetric", beta=2.0, cda=False)
    assert fused.token_ids != floor.token_ids
    assert fused.stats.delta_abs_mean > 0 and fused.stats.jsd_mean > 0


def test_gate_relaxes_acceptance_where_views_diverge(engine, views):
    """Random models barely use context, so the views diverge little (JSD ~0.04); summed over seeds the gate
    still accepts drafts that plain min(1, p/q) would have rejected, and never without the gate."""
    def gate_only(cda):
        return sum(run(engine, views, mode="asymmetric", acceptance="fused", beta=1.0, cda=cda, temperature=1.0, seed=seed)
                   .stats.gate_only_accepts for seed in range(20))

    assert gate_only(False) == 0
    assert gate_only(True) > 0
