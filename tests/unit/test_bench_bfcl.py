"""BFCL's items bound as tools and scored by BFCL's own checker (no model: the calls are written here)."""

import pytest

pytest.importorskip("bfcl_eval.constants.type_mappings", reason="needs bfcl-eval (make install)")

from asymspec_agents.bench.bfcl import CATEGORIES, Item, load_items, render, score, summarize, tools_of  # noqa: E402
from asymspec_agents.context.tools import validate_tools  # noqa: E402


@pytest.mark.parametrize("category", CATEGORIES)
def test_every_item_of_a_category_binds_as_valid_tools(category):
    items = load_items(category)
    assert len(items) >= 16
    for item in items:
        specs = validate_tools(tools_of(item.functions))
        assert [s.name for s in specs] == [f["name"].replace(".", "_") for f in item.functions]
        assert item.messages and item.messages[-1]["role"] == "user"


def test_bfcl_types_become_json_schema_types():
    functions = [{"name": "geo.area", "description": "d", "parameters": {"type": "dict", "properties": {
        "r": {"type": "float", "description": "radius"}, "pts": {"type": "tuple", "items": {"type": "integer"}},
        "opts": {"type": "dict", "properties": {"any_field": {"type": "any"}}}, "name": {"type": "string"}},
        "required": ["r", "missing"]}}]
    (tool,) = tools_of(functions)
    parameters = tool["function"]["parameters"]
    assert tool["function"]["name"] == "geo_area"
    assert parameters["type"] == "object" and parameters["required"] == ["r"]
    props = parameters["properties"]
    assert props["r"] == {"description": "radius", "type": "number"}
    assert props["pts"] == {"type": "array", "items": {"type": "integer"}}
    assert props["opts"]["properties"]["any_field"]["type"] == "string"


def test_the_checker_scores_calls_as_bfcl_does():
    item = load_items("simple_python", 1)[0]  # calculate_triangle_area(base=10, height=5)
    assert score(item, [{"calculate_triangle_area": {"base": 10, "height": 5}}]) == (True, "")
    assert score(item, [{"calculate_triangle_area": {"base": 10, "height": 5, "unit": "units"}}])[0]
    right, why = score(item, [{"calculate_triangle_area": {"base": 5, "height": 10}}])
    assert not right and "value" in why
    assert score(item, []) == (False, "no call")
    dotted = next(i for i in load_items("simple_python") if "." in i.functions[0]["name"])
    name = dotted.functions[0]["name"].replace(".", "_")
    answer = dotted.answer[0][dotted.functions[0]["name"]]
    arguments = {k: v[0] for k, v in answer.items() if v and v[0] != ""}
    assert score(dotted, [{name: arguments}])[0]  # "." in BFCL's name arrives as "_", as bound


def test_irrelevance_is_right_without_a_call_and_relevance_with_one():
    irrelevant = Item("x", "irrelevance", [{"role": "user", "content": "hi"}], [], None)
    assert score(irrelevant, []) == (True, "")
    assert score(irrelevant, [{"f": {}}]) == (False, "called a tool")
    relevant = Item("y", "live_relevance", [{"role": "user", "content": "hi"}], [], None)
    assert score(relevant, [{"f": {}}])[0] and not score(relevant, [])[0]


def test_summary_counts_accuracy_interval_and_call_rate():
    runs = [{"right": True, "calls": [{}], "seconds": 1.0}, {"right": False, "calls": [], "seconds": 3.0},
            {"right": True, "calls": [{}], "seconds": 2.0}]
    summary = summarize(runs)
    assert summary["right"] == 2 and summary["accuracy"] == pytest.approx(2 / 3)
    low, high = summary["interval"]
    assert low < 2 / 3 < high
    assert summary["call_rate"] == pytest.approx(2 / 3) and summary["seconds_per_item"] == 2.0


def test_the_report_names_the_command_that_reproduces_it():
    settings = {"items": 0, "verifiers": ["runs/agent"], "systems": ["asymspec"], "choices": ["auto"],
                "categories": ["irrelevance"], "drafter": "auto", "max_new_tokens": 128, "out": "x"}
    command = ("asymspec bench bfcl --items 0 --verifiers runs/agent --systems asymspec --choices auto "
               "--categories irrelevance")
    assert f"`{command}`" in render({"settings": settings, "rows": []})
    settings.update(drafter="bundled-agent-small", max_new_tokens=64)
    report = render({"settings": settings, "rows": []})
    assert f"`{command} --drafter bundled-agent-small --max-new-tokens 64`" in report
