"""The decision-scheduling benchmark runs end to end on a tiny pair and reports slot-0 shares."""

from asymspec_agents import AsymSpecEngine
from asymspec_agents.bench import decisions
from asymspec_agents.testing import tiny_random_pair


def test_scheduling_puts_every_tagged_decision_at_slot_zero_on_a_tiny_pair():
    pair = tiny_random_pair(seed=0, same=True, max_positions=16384)
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer, kv_cache="int8")
    rows = decisions.run(engine, count=1)
    scheduled = [r for r in rows if r["policy"] == "scheduled"]
    assert {r["task"] for r in rows} == {"tools", "needle"} and len(rows) == 4
    tools = next(r for r in scheduled if r["task"] == "tools")
    assert tools["decision_tokens"] >= 1  # the tool name is always a decision under the grammar
    assert all(slot == 0 for r in scheduled for slot in r["decision_slots"])
    assert all(r["tagged_at_slot0"] == r["decision_points_tagged"] for r in scheduled)
    table = decisions.render({"settings": {"kv_cache": "int8", "items": 1}, "rows": rows})
    assert "| tools | scheduled |" in table
