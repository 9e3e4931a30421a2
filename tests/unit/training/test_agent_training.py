"""Agent-tuning data and training on a tiny random model: held-out tools stay out, targets are what the product's
parser reads, values come from the question, results are computed, and training writes a delta that assembles."""

import argparse
import json
import re
from dataclasses import replace

import pytest

from asymspec_agents.context import DualContext, ToolResult, parse_tool_calls
from asymspec_agents.errors import AsymSpecError, InvalidInputError
from asymspec_agents.models.students import assemble_student
from asymspec_agents.testing import byte_tokenizer, tiny_random_model
from asymspec_agents.training.agent.catalogue import TOOLS, TWINS
from asymspec_agents.training.agent.run import TRAIN_FILE, _names, _trained, _value_in, train
from asymspec_agents.training.agent.transcripts import (GENERIC, KINDS, NEIGHBOURS, conversations,
                                                         held_out_conversations, readings, render, split_questions,
                                                         split_tools)

def ANSWERS(question: str) -> str:  # noqa: N802 (stands where the raw model's replies go)
    return f"A reply to: {question}"


@pytest.fixture(scope="module")
def data():
    train_tools, dev_tools = split_tools()
    train_questions, _ = split_questions()
    return (conversations(300, 0, train_tools, train_questions, ANSWERS, near_misses=0.06, twins=0.10,
                          unstated=0.04),
            held_out_conversations(60, 0, ANSWERS), train_tools, dev_tools)


def _offered(conversation) -> set[str]:
    return {tool["name"] for tool in conversation.tools}


def _variants(tools) -> set[str]:
    """Every name a tool may be offered under (as written, namespaced by domain, camelCase)."""
    camel = lambda name: re.sub(r"_(\w)", lambda m: m.group(1).upper(), name)  # noqa: E731
    return {v for t in tools for v in (t.name, f"{t.domain}.{t.name}", f"{t.domain}_{t.name}", camel(t.name))}


def _states_result(offered_name: str) -> bool:
    """Whether the tool's answer wording quotes its result (actions such as switching lights confirm instead)."""
    tool = next(t for t in TOOLS if offered_name in _variants([t]))
    return "{result}" in tool.answer or "{r[" in tool.answer


def test_held_out_tools_and_questions_never_reach_training(data):
    train_set, dev_set, train_tools, dev_tools = data
    assert dev_tools and not set(dev_tools) & set(train_tools)
    assert all(_offered(c) <= _variants(train_tools) for c in train_set)
    assert all(_offered(c) <= _variants(dev_tools) for c in dev_set)
    assert not _variants(train_tools) & _variants(dev_tools)
    dev_questions = set(split_questions()[1])
    assert not any(c.messages[0].content in dev_questions for c in train_set)


def test_every_kind_is_built_and_calls_are_expected_only_where_a_tool_fits(data):
    train_set = data[0]
    assert {c.kind for c in train_set} == set(KINDS)
    for c in train_set:
        assert bool(c.expected["calls"]) == (c.kind in ("call", "parallel", "chain", "error"))
        for call in c.expected["calls"]:
            assert call["name"] in _offered(c)
        if c.kind == "offtopic":  # the tool the question needs is not offered, nor any of its domain
            assert not c.messages[1].tool_calls


def test_no_tool_replies_offer_other_domains_or_near_misses_never_the_tool_asked_for(data):
    train_set, _, train_tools, _ = data
    for c in (c for c in train_set if c.kind in ("offtopic", "nearmiss")):
        asked = [t for t in train_tools if t.task in c.messages[1].content]
        assert len(asked) == 1, c.messages[1].content  # the reply names what the missing tool would do
        asked = asked[0]
        offered = [t for t in train_tools if _offered(c) & _variants([t])]
        assert offered and asked not in offered and not c.messages[1].tool_calls
        if c.kind == "offtopic":
            assert all(t.domain not in (asked.domain, "search") for t in offered)
        else:  # near the question's topic: its domain or a neighbouring one, never a tool that does everything
            group = next((g for g in NEIGHBOURS if asked.domain in g), {asked.domain})
            assert all(t.domain in group and t.name not in GENERIC for t in offered)
    assert sum(c.kind == "nearmiss" for c in train_set) >= 0.05 * len(train_set)


def test_near_company_offers_the_fitting_tool_among_near_ones(data):
    """near_company=1: every call conversation offers, beside the tool it calls, only tools near that tool's topic
    (at least one where there are any); the other kinds are drawn as before, and the share is checked."""
    train_tools, train_questions = data[2], split_questions()[0]
    crowded = conversations(300, 0, train_tools, train_questions, ANSWERS, near_company=1.0)
    calls = [c for c in crowded if c.kind == "call"]
    assert len(calls) > 100
    for c in calls:
        fitting = next(t for t in train_tools if c.expected["calls"][0]["name"] in _variants([t]))
        others = [t for t in train_tools if t is not fitting and _offered(c) & _variants([t])]
        group = next((g for g in NEIGHBOURS if fitting.domain in g), {fitting.domain})
        assert all(t.domain in group and t.name not in GENERIC for t in others)
        assert others or not [t for t in train_tools if t is not fitting and t.domain in group
                              and t.name not in GENERIC]
    plain = [c for c in conversations(300, 0, train_tools, train_questions, ANSWERS) if c.kind == "call"]
    assert sum(len(c.tools) for c in calls) / len(calls) > sum(len(c.tools) for c in plain) / len(plain)
    for share in (-0.1, 1.5):
        with pytest.raises(InvalidInputError, match="near_company is a share"):
            conversations(10, 0, train_tools, train_questions, ANSWERS, near_company=share)


def test_near_misses_twins_and_unstated_replace_off_topic_conversations_and_default_to_none(data):
    """near_misses=twins=unstated=0 (the defaults) draw what the recipe drew before those kinds existed (the shipped adapter
    stays reproducible); with them, the first conversations are the same until an off-topic draw becomes one."""
    train_tools, train_questions = data[2], split_questions()[0]
    plain = conversations(300, 0, train_tools, train_questions, ANSWERS)
    assert "nearmiss" not in {c.kind for c in plain}
    first = next(i for i, c in enumerate(data[0]) if c.kind in ("nearmiss", "twin", "unstated"))
    assert plain[first].kind == "offtopic" and plain[:first] == data[0][:first]
    assert not {"twin", "unstated"} & {c.kind for c in plain}
    with pytest.raises(InvalidInputError, match="near_misses"):
        conversations(10, 0, train_tools, train_questions, ANSWERS, near_misses=0.3)
    with pytest.raises(InvalidInputError, match="near_misses \\+ twins \\+ unstated"):
        conversations(10, 0, train_tools, train_questions, ANSWERS, near_misses=0.12, twins=0.06, unstated=0.06)
    with pytest.raises(InvalidInputError, match="twins must not be negative"):
        conversations(10, 0, train_tools, train_questions, ANSWERS, twins=-0.1)


def test_twins_offer_the_tool_asked_about_for_what_it_does_not_do(data):
    """A twin's question states the offered tool's own values but is one of its TWINS (never a question it answers);
    the other tools offered are of unrelated domains; the reply names the task asked for and calls nothing."""
    train_set, dev_set, train_tools, dev_tools = data
    twins = [c for c in train_set if c.kind == "twin"]
    assert len(twins) >= 0.06 * len(train_set)
    for c in twins:
        offered = [t for t in train_tools if _offered(c) & _variants([t])]
        asked = [t for t in offered if any(_matches(template, c.messages[0].content) for template, _ in
                                           TWINS.get(t.name, ()))]
        assert len(asked) == 1, c.messages[0].content
        tool = asked[0]
        task = next(task for template, task in TWINS[tool.name] if _matches(template, c.messages[0].content))
        assert task in c.messages[1].content and not c.messages[1].tool_calls and c.expected["calls"] == []
        assert not any(_matches(template, c.messages[0].content) for template in tool.asks)
        group = next((g for g in NEIGHBOURS if tool.domain in g), {tool.domain})
        assert all(t.domain not in group and t.domain != "search" for t in offered if t is not tool)
    assert any(c.kind == "twin" for c in conversations(60, 10_000, dev_tools, split_questions()[1], ANSWERS,
                                                       twins=0.2))


def test_unstated_questions_give_no_value_and_the_reply_asks_for_every_one(data):
    """An unstated question names an offered tool's task with none of its values; the reply asks for each required
    value (by its description) and calls nothing; twin replies never name a tool (they leaked into answers)."""
    train_set, train_tools = data[0], data[2]
    unstated = [c for c in train_set if c.kind == "unstated"]
    assert len(unstated) >= 0.02 * len(train_set)
    for c in unstated:
        tool = next(t for t in train_tools if t.task in c.messages[0].content and _offered(c) & _variants([t]))
        assert tool.domain != "search" and tool.name != "calculate"
        assert not c.messages[1].tool_calls and c.expected["calls"] == []
        for arg in tool.args:
            if arg.required and arg.type != "boolean":
                assert arg.description[1:] in c.messages[1].content, (arg.description, c.messages[1].content)
    for c in train_set:
        if c.kind == "twin":
            assert not _offered(c) & set(c.messages[1].content.replace(";", " ").split()), c.messages[1].content


def _matches(template: str, question: str) -> bool:
    """Whether `question` is `template` with its placeholders filled."""
    pattern = ".+?".join(re.escape(part) for part in re.split(r"{\w+}", template))
    return re.fullmatch(pattern, question) is not None


def test_argument_values_are_stated_in_the_question(data):
    for c in data[0]:
        if c.kind not in ("call", "error"):
            continue
        question = c.messages[0].content
        for value in c.expected["calls"][0]["arguments"].values():
            if isinstance(value, bool):
                continue
            spoken = [str(v) for v in value] if isinstance(value, list) else [str(value)]
            assert all(s in question for s in spoken), (question, value)


def test_rendered_targets_are_the_replies_the_product_parses(data):
    tokenizer = byte_tokenizer()
    context = DualContext(tokenizer)
    for c in data[0][:80]:
        rendered = render(context, c, tokenizer)
        assistant = [m for m in c.messages if type(m).__name__ == "AssistantMessage"]
        assert len(rendered.spans) == len(assistant)
        first = tokenizer.decode(rendered.ids[slice(*rendered.spans[0])])
        parsed = parse_tool_calls(first.replace("<|im_end|>", ""))
        assert [{"name": p.name, "arguments": p.arguments} for p in parsed.tool_calls] == \
            [{"name": call.name, "arguments": call.arguments} for call in assistant[0].tool_calls]
        if c.kind == "call" and _states_result(c.expected["calls"][0]["name"]):  # the answer states the result
            result = next(m for m in c.messages if isinstance(m, ToolResult)).content
            assert _value_in(result, assistant[-1].content), (result, assistant[-1].content)


def test_results_of_real_functions_are_computed():
    gcd = next(t for t in TOOLS if t.name == "greatest_common_divisor")
    assert gcd.result({"x": 84, "y": 36}, None) == 12
    weekday = next(t for t in TOOLS if t.name == "weekday_of")
    assert weekday.result({"date": "2026-12-03"}, None) == "Thursday"


def test_training_writes_a_delta_that_assembles_into_a_changed_model(tmp_path, data):
    import torch

    tokenizer = byte_tokenizer()
    model = tiny_random_model(len(tokenizer), seed=5, layers=2)
    context = DualContext(tokenizer)
    rendered = [render(context, c, tokenizer) for c in data[0][:6]]
    from asymspec_agents.models.students import StudentSpec

    spec = StudentSpec(trunk=0, top=(0, 1), rank=4, alpha=8.0, extra={"verifier": "tiny"})
    args = argparse.Namespace(seed=0, lr=1e-2, epochs=1, accumulate=2)
    history = train(model, spec, rendered, tmp_path, args)
    assert len(history["steps"]) == 3 and all(s["loss"] > 0 for s in history["steps"])
    assert json.loads((tmp_path / "student.json").read_text())["top"] == [0, 1]
    tuned = assemble_student(model, tmp_path)
    ids = torch.tensor([rendered[0].ids[:50]])
    assert not torch.allclose(tuned(ids).logits, model(ids).logits)


def test_report_only_takes_the_adapter_its_options_trained_and_nothing_else(tmp_path):
    from asymspec_agents.models.students import DELTA_FILE, SPEC_FILE, StudentSpec

    spec = StudentSpec(trunk=0, top=(0, 1), rank=4, alpha=8.0, extra={"verifier": "tiny", "examples": 6})
    recipe = {"examples": 6, "twins": 0.12, "near_misses": 0.06}
    with pytest.raises(AsymSpecError, match="needs a trained adapter"):
        _trained(tmp_path, spec, recipe)
    (tmp_path / SPEC_FILE).write_text(spec.to_json())
    (tmp_path / DELTA_FILE).write_bytes(b"")
    assert _trained(tmp_path, spec, recipe) == {}  # no history kept (trained before train.json existed)
    with pytest.raises(AsymSpecError, match="not trained with these options"):
        _trained(tmp_path, replace(spec, rank=8), recipe)
    history = {"steps": [{"epoch": 1.0, "loss": 0.5}], "train_seconds": 60.0, "recipe": recipe}
    (tmp_path / TRAIN_FILE).write_text(json.dumps(history))
    assert _trained(tmp_path, spec, recipe) == history
    with pytest.raises(AsymSpecError, match="other values of near_misses, twins"):
        _trained(tmp_path, spec, {**recipe, "twins": 0.0, "near_misses": 0.0})


def test_readings_are_trained_on_the_raw_models_reply_in_their_own_view():
    tokenizer = byte_tokenizer()
    asked = []

    def answer(conversation):  # stands where the raw model's reply in the conversation's view goes
        asked.append(conversation)
        return None if len(asked) == 3 else f"Reply {len(asked)} in the {conversation.view} view."

    reads = readings(12, 0, tokenizer, split_tools()[0], answer)
    assert len(asked) == 12 and len(reads) == 11  # a conversation without a reply is left out
    assert {c.kind for c in reads} <= {"passage", "plain", "tool_result"} and "tool_result" in {c.kind for c in reads}
    assert {c.view for c in reads} == {"full", "comp"}
    for c in reads:
        question = next(a for a in asked if a.messages == c.messages[:-1])
        assert c.messages[-1].content == f"Reply {asked.index(question) + 1} in the {c.view} view."
        assert c.policy is not None and c.expected["calls"] == []
    for c in reads[:4]:
        rendered = render(DualContext(tokenizer), c, tokenizer)
        reply = tokenizer.decode(rendered.ids[slice(*rendered.spans[-1])])
        assert reply.startswith(c.messages[-1].content)
        other = render(DualContext(tokenizer), replace(c, view="full" if c.view == "comp" else "comp"), tokenizer)
        shorter, longer = sorted((rendered, other), key=lambda r: r.spans[-1][0])
        assert (shorter is rendered) == (c.view == "comp")  # its own policy compressed the documents
    unanswered = readings(4, 0, tokenizer, split_tools()[0])
    assert all(type(c.messages[-1]).__name__ != "AssistantMessage" for c in unanswered)


def test_lookups_hold_their_answer_in_the_search_result_and_are_not_the_examples_question():
    """Each held-out lookup ends at a search result (a reference section, capped as a search tool caps it) that
    names the answer, the answer itself left to the model; none is the examples' assert question."""
    from asymspec_agents.training.agent.lookups import LOOKUPS, MAX_CHARS, lookups

    found = lookups()
    assert len(found) == len(LOOKUPS) == 13
    for c in found:
        result = c.messages[-1]
        assert isinstance(result, ToolResult) and len(result.content) <= MAX_CHARS
        assert c.expected["value"] in result.content and c.expected["value"] not in c.messages[0].content
        assert "assert" not in c.messages[0].content
        assert c.messages[1].tool_calls[0].name in _offered(c)
    assert _names("continue", 'The "continue" statement.') and not _names("continue", "The loop continues.")
    assert _names("__enter__", 'It calls "__enter__()".') and not _names("pass", "It passes.")
