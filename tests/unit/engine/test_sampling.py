"""Sampled AsymSpec with β=0 and the gate off draws from the verifier's own distribution on the compressed view."""

from sampling_reference import total_variation, two_token_distribution

from asymspec_agents import GenerationConfig

TOP_K = 2
LENGTH = 2


def test_sampled_asymmetric_with_beta_zero_reproduces_the_verifier_distribution(engine, pair, views):
    full, comp = views
    probs = two_token_distribution(pair.verifier, comp, TOP_K)
    config = dict(mode="asymmetric", beta=0.0, cda=False, acceptance="fused", temperature=1.0, top_k=TOP_K, max_new_tokens=LENGTH,
                  k_max=2, adaptive_k=False, decisions=None)
    samples = [tuple(engine.generate(full, comp, GenerationConfig(seed=seed, **config)).token_ids)
               for seed in range(2000)]
    tv_small, tv_large = total_variation(samples[:200], probs), total_variation(samples, probs)
    assert tv_large < 0.04
    assert tv_large < tv_small
    # the drafter's own distribution (what a broken acceptance rule would return) is far from the verifier's
    drafter_probs = two_token_distribution(pair.drafter, full, TOP_K)
    assert sum(abs(drafter_probs.get(k, 0) - probs.get(k, 0)) for k in set(probs) | set(drafter_probs)) / 2 > 0.2


def test_same_seed_gives_same_tokens_and_different_seeds_differ(engine, views):
    full, comp = views
    config = GenerationConfig(mode="asymmetric", temperature=0.9, top_p=0.95, max_new_tokens=24)
    first = engine.generate(full, comp, config).token_ids
    assert engine.generate(full, comp, config).token_ids == first
    others = {tuple(engine.generate(full, comp, config, seed=s).token_ids) for s in range(1, 6)}
    assert len(others | {tuple(first)}) > 1
