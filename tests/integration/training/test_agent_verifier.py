"""The shipped `bundled-agent` (the bundled model tuned by `asymspec train-agent`): it assembles from its delta,
decides by itself under tool_choice="auto" (calls a fitting tool with the question's values, answers a general
question without one), answers from a tool result in words; and `asymspec train-agent` runs end to end."""

import json

import pytest

from asymspec_agents import AsymSpecEngine, GenerationConfig
from asymspec_agents.chat import AsymSpecChat
from asymspec_agents.models.loading import STUDENTS
from asymspec_agents.models.students import StudentSpec
from asymspec_agents.cli import main as asymspec

POPULATION = {"name": "lookup_population", "description": "Look up the population of a country.",
              "parameters": {"type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"]}}
CALCULATOR = {"name": "calculator", "description": "Evaluate an arithmetic expression such as '2 * (3 + 4)'.",
              "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                             "required": ["expression"]}}


@pytest.fixture(scope="module")
def chats():
    raw = AsymSpecChat(AsymSpecEngine.shared("bundled"), config=GenerationConfig(mode="full", max_new_tokens=48))
    tuned = AsymSpecChat(AsymSpecEngine.shared("bundled-agent"), config=GenerationConfig(mode="full", max_new_tokens=48))
    return raw, tuned


def test_bundled_agent_is_a_delta_on_the_bundled_model():
    folder = STUDENTS["bundled-agent"]
    spec = StudentSpec.from_json((folder / "student.json").read_text())
    assert spec.extra["verifier"] == "bundled" and spec.trunk == 0 and len(spec.top) == 30
    assert (folder / "delta.safetensors").stat().st_size < 24 * 2**20


def test_the_tuned_model_calls_a_fitting_tool_under_auto_where_the_raw_one_does_not(chats):
    raw, tuned = chats
    question = [{"role": "user", "content": "What is the population of Kenya?"}]
    assert not raw.reply(question, tools=[POPULATION, CALCULATOR], tool_choice="auto").tool_calls
    reply = tuned.reply(question, tools=[POPULATION, CALCULATOR], tool_choice="auto")
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [("lookup_population", {"country": "Kenya"})]


def test_the_tuned_model_answers_without_a_tool_when_none_fits(chats):
    reply = chats[1].reply([{"role": "user", "content": "Write one sentence about the sea."}],
                           tools=[POPULATION, CALCULATOR], tool_choice="auto")
    assert not reply.tool_calls and reply.text.strip()


def test_the_tuned_model_states_a_tool_result_in_words(chats):
    messages = [{"role": "user", "content": "What is the population of Kenya?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "name": "lookup_population",
                                                                      "arguments": {"country": "Kenya"}}]},
                {"role": "tool", "tool_call_id": "c0", "name": "lookup_population", "content": "55.1 million"}]
    reply = chats[1].reply(messages, tools=[POPULATION, CALCULATOR], tool_choice="auto")
    assert not reply.tool_calls and "55.1 million" in reply.text and "<" not in reply.text
    assert reply.finish_reason == "stop"


def test_train_agent_runs_end_to_end_on_the_bundled_model(tmp_path, capsys):
    options = ["--examples", "4", "--dev", "2", "--reads", "3", "--dev-reads", "2", "--dev-lookups", "1", "--accumulate", "2", "--rank", "2",
               "--out", str(tmp_path)]
    code = asymspec(["train-agent", *options])
    assert code == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert 4 < report["train_conversations"] <= 7 and report["dev"]["tuned"]["counts"]["conversations"] == 2
    assert sum(c["replies"] for c in report["dev_reads"]["tuned"]["counts"].values()) == 2
    assert [c["questions"] for c in report["lookups"]["tuned"]["counts"].values()] == [1, 1]
    assert json.loads((tmp_path / "read_answers.json").read_text())  # the raw model's replies, kept for a rerun
    assert (tmp_path / "delta.safetensors").is_file() and (tmp_path / "loss.png").is_file()
    out = capsys.readouterr().out
    assert "| decision (call iff a tool fits) |" in out and "| states the planted value, whole |" in out
    assert "| the answer names the section's answer, compressed view |" in out
    # the report again for the adapter in --out, without training: the same measures, the training history kept
    delta = (tmp_path / "delta.safetensors").read_bytes()
    (tmp_path / "report.json").unlink()
    assert asymspec(["train-agent", *options, "--report-only"]) == 0
    again = json.loads((tmp_path / "report.json").read_text())
    assert again["dev"] == report["dev"] and again["train_seconds"] == report["train_seconds"]
    assert (tmp_path / "delta.safetensors").read_bytes() == delta
    assert asymspec(["train-agent", *options[:-2], "--rank", "4", "--out", str(tmp_path), "--report-only"]) == 2
    assert "not trained with these options" in capsys.readouterr().err
