import pytest

from asymspec_agents.context import CompressionPolicy, DualContext, HeadTail
from asymspec_agents.errors import ConfigError


def test_partial_mappings_override_only_the_kinds_they_name():
    policy = CompressionPolicy(budgets={"tool_result": 64}, compressors={"passage": "head_tail"})
    assert policy.budgets["tool_result"] == 64 and policy.budgets["passage"] == 128
    assert policy.compressors["passage"] == "head_tail" and policy.compressors["tool_result"] == "bm25"


@pytest.mark.parametrize("kwargs, message", [
    ({"budgets": {"tool_output": 10}}, "unknown kinds \\['tool_output'\\]"),
    ({"budgets": {"passage": 3}}, "must be an int >= 16"),
    ({"budgets": {"passage": 100.0}}, "must be an int >= 16"),
    ({"compressors": {"passage": "gzip"}}, "'gzip' is unknown"),
    ({"compressors": {"tools": "bm25"}}, "unknown kinds"),
    ({"keep_last_turns": -1}, "keep_last_turns"),
    ({"total_budget": 0}, "total_budget"),
])
def test_bad_policies_are_rejected_with_what_to_fix(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        CompressionPolicy(**kwargs)


def test_surprisal_without_a_drafter_says_to_pass_one(tok):
    with pytest.raises(ConfigError, match="needs the drafter"):
        DualContext(tok, CompressionPolicy(compressors={"tool_result": "surprisal"}))


def test_compressor_instances_are_used_as_given(tok):
    mine = HeadTail(head_fraction=0.1)
    ctx = DualContext(tok, CompressionPolicy(compressors={"tool_result": mine}))
    assert ctx.compressors["tool_result"] is mine


def test_old_turn_budget_applies_to_assistant_text_outside_the_window():
    policy = CompressionPolicy(keep_last_turns=2, old_turn_budget=40)
    assert policy.budget("assistant", old_turn=True) == 40
    assert policy.budget("assistant", old_turn=False) is None
