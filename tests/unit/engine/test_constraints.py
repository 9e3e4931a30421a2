"""Grammar-constrained decoding inside the speculation loop: masks on draft and target, rollback on rejection."""

import json

import pytest
import xgrammar as xgr

from asymspec_agents import GenerationConfig
from asymspec_agents.engine.constraints import GrammarConstraint

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "days": {"type": "integer", "minimum": 1, "maximum": 30}},
          "required": ["city", "days"], "additionalProperties": False}


@pytest.fixture(scope="module")
def compiled(pair):
    info = xgr.TokenizerInfo.from_huggingface(pair.tokenizer, vocab_size=len(pair.tokenizer))
    return xgr.GrammarCompiler(info).compile_json_schema(json.dumps(SCHEMA), any_whitespace=False)


def constrained(engine, views, compiled, **settings):
    config = GenerationConfig(max_new_tokens=120, **settings)
    return engine.generate(*views, config, constraint=GrammarConstraint(compiled))


@pytest.mark.parametrize("mode", ["compressed", "symmetric", "asymmetric"])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_every_output_is_valid_json_for_the_schema(engine, views, compiled, mode, temperature):
    result = constrained(engine, views, compiled, mode=mode, temperature=temperature, seed=3)
    value = json.loads(result.text, strict=False)  # xgrammar's JSON strings admit raw control characters
    assert set(value) == {"city", "days"} and isinstance(value["days"], int) and 1 <= value["days"] <= 30
    assert result.finish_reason == "stop"


def test_random_drafter_is_rejected_and_the_grammar_rolls_back(engine, views, compiled):
    result = constrained(engine, views, compiled, mode="asymmetric", beta=1.0)
    assert result.stats.drafted > result.stats.accepted  # rejections happened, so rollback was exercised
    json.loads(result.text, strict=False)


def test_beta_zero_constrained_asymmetric_equals_constrained_compressed_greedy(engine, views, compiled):
    floor = constrained(engine, views, compiled, mode="compressed")
    fused = constrained(engine, views, compiled, mode="asymmetric", beta=0.0, cda=False, acceptance="fused")
    assert fused.token_ids == floor.token_ids


@pytest.mark.parametrize("rule", [dict(acceptance="fused"), dict(acceptance="ratio", fuse_bonus=True)])
def test_identical_drafter_accepts_everything_under_the_grammar(same_engine, views, compiled, rule):
    ceiling = constrained(same_engine, views, compiled, mode="full")
    fused = constrained(same_engine, views, compiled, mode="asymmetric", **rule)
    assert fused.token_ids == ceiling.token_ids and fused.stats.acceptance_rate == 1.0


ENUM_SCHEMA = {"type": "object", "properties": {"tool": {"enum": ["search", "calculator", "weather"]},
                                                "ok": {"type": "boolean"}},
               "required": ["tool", "ok"], "additionalProperties": False}


def test_grammar_branch_points_are_decisions_committed_at_slot_zero(pair, same_engine, views):
    """Where the grammar allows a few different next characters (which enum value, true or false) the
    verifier decides at slot 0, with no text trigger; forced JSON and free text are not decisions."""
    from asymspec_agents import DecisionPolicy

    info = xgr.TokenizerInfo.from_huggingface(pair.tokenizer, vocab_size=len(pair.tokenizer))
    grammar = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(ENUM_SCHEMA), any_whitespace=False)
    policy = DecisionPolicy(triggers=(), grammar_choices=8)
    result = same_engine.generate(*views, GenerationConfig(max_new_tokens=60, mode="asymmetric", decisions=policy),
                                  constraint=GrammarConstraint(grammar))
    value = json.loads(result.text)
    stats = result.stats
    # the byte tokenizer spells one byte per token: text index == token index; the enum's first letter and
    # true/false are where the grammar branches
    first_letter = result.text.index('"' + value["tool"]) + 1
    ok_at = result.text.index(json.dumps(value["ok"]))
    assert {first_letter, ok_at} <= set(stats.decision_positions)
    assert all(stats.token_slots[i] == 0 for i in stats.decision_positions)
    assert len(stats.decision_positions) <= 4  # not every forced character
    free = same_engine.generate(*views, GenerationConfig(max_new_tokens=30, mode="asymmetric", decisions=policy))
    assert free.stats.decision_points == 0
