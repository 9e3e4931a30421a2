"""Prefix caches across calls, and decision points scheduled at verification slot 0."""

import pytest

from asymspec_agents import AsymSpecEngine, DecisionPolicy, GenerationConfig


@pytest.mark.parametrize("mode", ["asymmetric", "symmetric", "full"])
def test_second_call_extending_the_conversation_equals_a_fresh_engine_and_prefills_only_new_tokens(pair, views, mode):
    full, comp = views
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    config = GenerationConfig(mode=mode, max_new_tokens=20)
    first = engine.generate(full, comp, config)
    turn = pair.tokenizer("\nuser: and then?\n")["input_ids"]
    full2, comp2 = full + first.token_ids + turn, comp + first.token_ids + turn

    reused = engine.generate(full2, comp2, config)
    fresh = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer).generate(full2, comp2, config)
    assert reused.token_ids == fresh.token_ids
    for name, stream in reused.stats.streams.items():
        prompt = full2 if stream.view == "full" else comp2
        # the cache held prompt + generated minus the last committed token (a symmetric drafter may lag one
        # more: it reads x_k with the next block); only the rest is prefilled
        lag = 1 if stream.role == "drafter" and mode == "symmetric" else 0
        assert stream.reused_tokens + stream.prefill_tokens == len(prompt) - 1, name
        assert len(turn) <= stream.prefill_tokens <= len(turn) + lag, name
    assert fresh.stats.streams["V_" + ("full" if mode == "full" else "comp")].reused_tokens == 0


def test_a_shorter_unrelated_prompt_after_a_long_one_is_served_correctly(pair, views):
    full, comp = views
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    engine.generate(full, comp, max_new_tokens=10)
    other = pair.tokenizer("Completely different text.")["input_ids"]
    again = engine.generate(other, other[-5:], max_new_tokens=15)
    fresh = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer).generate(other, other[-5:], max_new_tokens=15)
    assert again.token_ids == fresh.token_ids


CAPITAL_END = DecisionPolicy(triggers=(r"[A-Z]$",))  # random byte text has many capitals: many decisions


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_decision_point_is_committed_at_slot_zero(same_engine, views, temperature):
    full, comp = views
    result = same_engine.generate(full, comp, mode="asymmetric", max_new_tokens=60, decisions=CAPITAL_END,
                                  temperature=temperature)
    stats = result.stats
    assert stats.decision_points > 3
    assert all(stats.token_slots[i] == 0 for i in stats.decision_positions)
    assert stats.decision_points_at_slot0 == stats.decision_points
    # an identical drafter is always accepted, so without scheduling tokens land at later slots
    assert max(stats.token_slots) > 0


def test_scheduling_decision_points_does_not_change_greedy_output_under_the_fused_rule(engine, same_engine, views):
    """With γ = 1 the fused rule accepts exactly the fused argmax, so who produces a token cannot change it. (The
    ratio rule accepts tokens the verifier would not pick, so there scheduling does change the output.)"""
    full, comp = views
    for eng in (engine, same_engine):
        plain = eng.generate(full, comp, mode="asymmetric", acceptance="fused", max_new_tokens=40, decisions=None)
        scheduled = eng.generate(full, comp, mode="asymmetric", acceptance="fused", max_new_tokens=40,
                                 decisions=CAPITAL_END)
        assert scheduled.token_ids == plain.token_ids
        assert plain.stats.decision_points == 0


def test_entropy_threshold_tags_decisions_at_slot_zero(same_engine, views):
    full, comp = views
    policy = DecisionPolicy(triggers=(), entropy_threshold=0.5)
    result = same_engine.generate(full, comp, mode="symmetric_full", max_new_tokens=60, decisions=policy)
    ceiling = same_engine.generate(full, comp, mode="full", max_new_tokens=60, decisions=None)
    assert result.token_ids == ceiling.token_ids
    assert result.stats.decision_points > 0
    assert all(result.stats.token_slots[i] == 0 for i in result.stats.decision_positions)


def test_default_policy_tags_tool_names_final_answers_and_options():
    policy = DecisionPolicy()
    assert policy.text_triggers('<tool_call>\n{"name": "')
    assert policy.text_triggers("Thought: done.\nFinal Answer:")
    assert policy.text_triggers("The answer is (")
    assert not policy.text_triggers('{"name": "x", "arguments": {"')
    assert not policy.text_triggers("Final Answer: Paris")
    assert not DecisionPolicy.none().text_triggers("Final Answer:")


def test_prefill_warms_every_stream_and_fresh_flops_count_the_saved_prefill(pair, views):
    full, comp = views
    cold = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer).generate(full, comp, max_new_tokens=10)
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    engine.prefill(full, comp)
    warm = engine.generate(full, comp, max_new_tokens=10)
    assert warm.token_ids == cold.token_ids
    assert all(s.prefill_tokens == 0 for s in warm.stats.streams.values())
    for role in ("verifier", "drafter"):
        assert warm.stats.flops(role) < cold.stats.flops(role)
        assert warm.stats.flops(role, fresh=True) == pytest.approx(cold.stats.flops(role), rel=0.01)


def test_an_identical_drafter_copies_the_verifiers_prompt_cache_instead_of_prefilling_it(same_engine, views):
    full, comp = views
    same_engine.reset()
    result = same_engine.generate(full, comp, mode="symmetric_full", max_new_tokens=20)
    drafter, verifier = result.stats.streams["S_full"], result.stats.streams["V_full"]
    assert verifier.prefill_tokens == len(full) - 1
    assert drafter.prefill_tokens == 0 and drafter.reused_tokens == len(full) - 1
    assert result.token_ids == same_engine.generate(full, comp, mode="full", max_new_tokens=20).token_ids
    same_engine.reset()
    asym = same_engine.generate(full, comp, mode="asymmetric", max_new_tokens=20)
    assert asym.stats.streams["S_comp"].prefill_tokens == 0  # copied from V_comp; S_full has no twin
    assert asym.stats.streams["S_full"].prefill_tokens == len(full) - 1
