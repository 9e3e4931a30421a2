"""The accuracy/cost/scaling harness: deterministic tasks, scoring, gap arithmetic, and a tiny end-to-end run."""

from types import SimpleNamespace

import pytest

from asymspec_agents import AsymSpecEngine
from asymspec_agents.bench import accuracy, tasks
from asymspec_agents.context.tool_format import ParsedToolCall
from asymspec_agents.testing import tiny_random_pair


@pytest.mark.parametrize("task", ["needle", "needle2", "tools", "retention", "tool_output"])
def test_task_builders_are_deterministic_in_their_seed(task):
    def fingerprint(items):
        return [(i.id, i.answer, i.split, repr(i.messages), [t.name for t in i.tools]) for i in items]

    assert fingerprint(tasks.build(task, 6, seed=1)) == fingerprint(tasks.build(task, 6, seed=1))
    assert fingerprint(tasks.build(task, 6, seed=1)) != fingerprint(tasks.build(task, 6, seed=2))
    splits = [i.split for i in tasks.build(task, 10, seed=1)]
    assert splits.count("dev") == 3 and splits.count("test") == 7


def test_needle_items_plant_the_answer_in_the_passage_and_not_in_the_question():
    for item in tasks.build("needle2", 5):
        passage = item.messages[1].passages[0].text
        assert item.answer in passage and item.answer not in item.messages[1].content


def test_tool_output_items_plant_the_answer_in_the_result_of_a_call_already_made():
    for item in tasks.build("tool_output", 5):
        call, result = item.messages[2].tool_calls[0], item.messages[3]
        assert result.tool_call_id == call.id and result.name == call.name and item.answer in result.content
        assert all(item.answer not in m.content for m in item.messages if m is not result)


def test_scoring_on_hand_made_replies():
    needle = tasks.build("needle", 1)[0]
    assert needle.correct(SimpleNamespace(text=f"The code is {needle.answer}.", tool_calls=[]))
    assert not needle.correct(SimpleNamespace(text="The code is 0000.", tool_calls=[]))
    tool = tasks.build("tools", 1)[0]
    assert tool.correct(SimpleNamespace(text="", tool_calls=[ParsedToolCall(tool.answer, {}, "")]))
    assert not tool.correct(SimpleNamespace(text=tool.answer, tool_calls=[], invalid_tool_calls=[]))


def record(item, system, correct, split="test"):
    return {"task": "needle", "compressor": "head_tail", "ratio": 4, "item": item, "split": split, "system": system,
            "correct": correct, "acceptance": None, "seconds": 1.0, "verifier_flops": 2.0 if system == "ceiling" else 1.0,
            "drafter_flops": 0.0, "full_tokens": 10, "comp_tokens": 5}


def test_gap_closed_is_the_share_of_the_floor_to_ceiling_gap_recovered():
    names = [s.name for s in accuracy.systems([1.0, 2.0], [True], rules=["ratio"])]
    assert names == ["floor", "ceiling", "symmetric", "ratio β=1", "ratio β=2"]
    records = []
    for i in range(4):
        records += [record(f"i{i}", "floor", False), record(f"i{i}", "ceiling", True),
                    record(f"i{i}", "symmetric", False), record(f"i{i}", "ratio β=1", i < 2),
                    record(f"i{i}", "ratio β=2", False)]
    records += [record("d0", name, name != "ratio β=2", split="dev") for name in names]
    rows = {r["system"]: r for r in accuracy.summarize(records, names, resamples=200)}
    assert rows["ratio β=1"]["accuracy"] == 0.5 and rows["ratio β=1"]["gap_closed"] == 0.5
    assert rows["symmetric"]["gap_closed"] == 0.0 and rows["ceiling"]["gap_closed"] == 1.0
    low, high = rows["ratio β=1"]["gap_closed_ci"]
    assert 0.0 <= low <= 0.5 <= high <= 1.0
    assert rows["floor"]["verifier_flops_vs_ceiling"] == 0.5 and rows["floor"]["total_flops_vs_ceiling"] == 0.5
    assert rows["ratio β=1"]["seconds_vs_ceiling"] == 1.0
    assert rows["ratio β=1"]["chosen_on_dev"] and not rows["ratio β=2"]["chosen_on_dev"]
    assert rows["ratio β=1"]["n_test"] == 4


def test_tiny_end_to_end_run_writes_tables_and_plots(tmp_path):
    pair = tiny_random_pair(seed=0, max_positions=16384)
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    run_plan = {"items": 3, "settings": {"needle": [("head_tail", 4)], "tools": [("signatures", None)],
                                         "tool_output": [("head_tail", 4)]},
                "systems": accuracy.systems([0.0, 1.0], [True])}
    records = accuracy.run_accuracy(engine, run_plan, seed=0)
    assert len(records) == 3 * 3 * 7  # floor, ceiling, symmetric, two β under each of two rules
    assert all(r["comp_tokens"] < r["full_tokens"] for r in records)
    tool_output = [r for r in records if r["task"] == "tool_output"]
    assert tool_output and all(r["comp_tokens"] < 0.5 * r["full_tokens"] for r in tool_output)  # the result is cut
    rows = accuracy.summarize(records, [s.name for s in run_plan["systems"]], resamples=50)
    results = {"pair": "tiny", "quick": True, "date": "today", "machine": "test", "accuracy": rows}
    (tmp_path / "results.md").write_text(accuracy.render_markdown(results))
    accuracy.plot_all(results, tmp_path)
    assert "gap closed" in (tmp_path / "results.md").read_text()
    assert (tmp_path / "accuracy.png").stat().st_size > 10_000 and (tmp_path / "gap_and_flops.png").is_file()


def test_agent_script_grows_the_history_step_by_step():
    tokenizer = tiny_random_pair(seed=0).tokenizer
    conversations = accuracy.agent_script(tokenizer, steps=4, target_tokens=2000)
    assert [len(c) for c in conversations] == [2, 4, 6, 8]
    assert all(a == b[: len(a)] for a, b in zip(conversations, conversations[1:]))


def test_every_setting_of_the_full_plan_runs_and_compresses():
    """The full grid (every task × compressor × ratio) on one item each: all run and every view is compressed."""
    pair = tiny_random_pair(seed=0, max_positions=16384)
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    full = accuracy.plan(quick=False)
    run_plan = {"items": 1, "settings": full["settings"],
                "systems": [s for s in full["systems"] if s.name in ("floor", "ratio β=1.5 no-gate")]}
    assert len(run_plan["systems"]) == 2
    records = accuracy.run_accuracy(engine, run_plan, seed=0)
    settings = {(task, c, r) for task, found in full["settings"].items() for c, r in found}
    assert {(r["task"], r["compressor"], r["ratio"]) for r in records} == settings
    assert len(records) == 2 * len(settings)
    assert all(r["comp_tokens"] < r["full_tokens"] for r in records)


def test_scaling_run_reuses_caches_between_steps():
    pair = tiny_random_pair(seed=0, max_positions=16384)
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    scaling = accuracy.run_scaling(engine, steps=3, max_new_tokens=4)
    steps = scaling["steps"]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert steps[0]["full_tokens"] < steps[1]["full_tokens"] < steps[2]["full_tokens"]
    for before, after in zip(steps, steps[1:]):  # each step prefills little more than what it added to each view
        added = {view: after[f"{view}_tokens"] - before[f"{view}_tokens"] for view in ("full", "comp")}
        # the drafter reads the full view, the verifier and the (different) drafter the compressed one
        assert after["prefilled_tokens_with_reuse"] <= added["full"] + 2 * added["comp"] + 64
        assert added["full"] + 2 * added["comp"] + 64 < after["full_tokens"] + 2 * after["comp_tokens"]  # fresh
    assert all(r["fresh_seconds"] > 0 and r["hf_generate_seconds"] > 0 for r in steps)
    assert scaling["step12_over_step2_with_reuse"] > 0


def test_a_plan_narrows_to_the_chosen_settings_and_systems():
    narrowed = accuracy.narrow(accuracy.plan(quick=False), tasks=["needle", "tools"], compressors=["head_tail"],
                               ratios=[4, 8], betas=[1.0], gate="off", rules=["fused"])
    assert narrowed["settings"] == {"needle": [("head_tail", 4), ("head_tail", 8)], "tools": [("signatures", None)]}
    assert [s.name for s in narrowed["systems"]] == ["floor", "ceiling", "symmetric", "fused β=1 no-gate"]
    assert accuracy.narrow(accuracy.plan(quick=True)) == accuracy.plan(quick=True)


def test_parts_run_in_separate_processes_merge_into_one_result():
    names = ["floor", "ceiling", "symmetric"]

    def part(task, correct):
        records = [{**record(f"i{i}", name, correct if name == "symmetric" else name == "ceiling"), "task": task}
                   for i in range(3) for name in names]
        return {"pair": "bundled", "seed": 0, "quick": False, "date": "d", "machine": "m", "records": records,
                "plan": {"items": 3, "systems": names, "settings": {task: [["head_tail", 4]]}}}

    merged = accuracy.merge_parts([part("needle", True), {**part("retention", False), "scaling": {"steps": []}}])
    assert merged["plan"]["settings"] == {"needle": [["head_tail", 4]], "retention": [["head_tail", 4]]}
    assert merged["run"] == "part of the full grid" and merged["scaling"] == {"steps": []}
    rows = {(r["task"], r["system"]): r for r in merged["accuracy"]}
    assert rows["needle", "symmetric"]["gap_closed"] == 1.0 and rows["retention", "symmetric"]["gap_closed"] == 0.0
    with pytest.raises(ValueError, match="in two parts"):
        accuracy.merge_parts([part("needle", True), part("needle", False)])
    with pytest.raises(ValueError, match="different seed"):
        accuracy.merge_parts([part("needle", True), {**part("retention", True), "seed": 1}])


def test_parts_that_cover_a_whole_grid_in_any_order_merge_into_the_whole_run():
    grid = accuracy.plan(quick=False, pair="bundled-small")
    names = ["floor", "ceiling"]

    def part(settings):
        records = [{**record("i0", name, name == "ceiling"), "task": task, "compressor": compressor, "ratio": ratio}
                   for task, found in settings.items() for compressor, ratio in found for name in names]
        return {"pair": "bundled-small", "seed": 0, "quick": False, "date": "d", "machine": "m", "records": records,
                "plan": {"items": grid["items"], "systems": names,
                         "settings": {task: [list(s) for s in found] for task, found in settings.items()}}}

    tasks = list(grid["settings"])
    first = part({task: grid["settings"][task][::-1] for task in tasks[:2]})  # another order than the plan's
    rest = part({task: grid["settings"][task] for task in tasks[2:][::-1]})
    assert accuracy.merge_parts([first])["run"] == "part of the full grid"
    whole = accuracy.merge_parts([first, rest])
    assert "run" not in whole and whole["parts"] == 2
    assert accuracy.merge_parts([{**whole, "scaling": {"steps": []}}])["parts"] == 2  # a merged part counts its own


def test_accuracy_comes_with_its_wilson_interval():
    runs = {f"i{i}": {"correct": i < 7} for i in range(10)}
    low, high = accuracy._wilson(runs, list(runs))
    assert (round(low, 3), round(high, 3)) == (0.397, 0.892)  # 7/10: the textbook Wilson 95% interval
    assert accuracy._wilson({"a": {"correct": True}}, ["a"])[1] == 1.0 and accuracy._wilson(runs, []) is None
