"""The shipped `bundled-small` drafter: it assembles from the bundled weights and its committed delta, is cheaper
than its verifier, drafts in the engine; and `asymspec distill-drafter` runs end to end on the bundled model."""

import json

import torch

from asymspec_agents import AsymSpecEngine, GenerationConfig
from asymspec_agents.models import load_model
from asymspec_agents.models.loading import STUDENTS, assembled_student_dir
from asymspec_agents.models.students import StudentSpec, assemble_student
from asymspec_agents.training.distill.examples import TOOL_KINDS
from asymspec_agents.training.distill.run import main as distill_main


def test_bundled_small_assembles_once_from_its_delta_and_matches_a_fresh_assembly(bundled):
    verifier, tokenizer = bundled
    folder = STUDENTS["bundled-small"]
    spec = StudentSpec.from_json((folder / "student.json").read_text())
    assert spec.extra["verifier"] == "bundled" and (folder / "delta.safetensors").stat().st_size < 8 * 2**20
    student, student_tokenizer = load_model("bundled-small")
    assert assembled_student_dir(folder) == assembled_student_dir(folder)  # cached: one folder per delta
    assert student.config.num_hidden_layers == len(spec.layers) < verifier.config.num_hidden_layers
    assert student_tokenizer.get_vocab() == tokenizer.get_vocab()
    ids = torch.tensor([tokenizer("The override code is 4821. What is the override code?")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(student(ids).logits, assemble_student(verifier, folder)(ids).logits,
                                   atol=1e-4, rtol=1e-4)


def test_bundled_small_drafts_for_the_bundled_verifier_at_a_fraction_of_its_cost(bundled):
    _, tokenizer = bundled
    engine = AsymSpecEngine.shared("bundled", "bundled-small")
    text = "Remember: the code is 4821. " + "Python is a programming language. " * 60 + "What is the code?"
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                           tokenize=False)
    full = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    comp = full[:12] + full[-40:]
    for rule in ("ratio", "fused"):
        result = engine.generate(full, comp, GenerationConfig(mode="asymmetric", acceptance=rule, max_new_tokens=16))
        stats = result.stats
        assert stats.drafted > 0 and result.text
        # per token the drafter's weights cost well under half of the verifier's
        drafter = stats.flops("drafter") / stats.tokens_processed("drafter")
        verifier = stats.flops("verifier") / stats.tokens_processed("verifier")
        assert drafter < 0.5 * verifier


def test_distill_drafter_runs_end_to_end_on_the_bundled_model(tmp_path, capsys):
    code = distill_main(["--examples", "2", "--dev", "1", "--tool-examples", "1", "--tool-kinds", *TOOL_KINDS,
                         "--engine-prompts", "1",
                         "--epochs", "1", "--rank", "4", "--top", "17", "--out", str(tmp_path)])
    assert code == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["train_records"] == 3 and report["dev"] and set(report["engine"]) >= {"asymmetric ratio"}
    assert sum(row["records"] for row in report["dev_by_kind"].values()) == report["dev_records"] == 2
    assert set(report["dev_by_kind"]) & {"tool_call", "tool_result"}  # the agent transcript's dev share
    assert (tmp_path / "loss.png").stat().st_size > 0 and "Distilled drafter" in capsys.readouterr().out
    student = assemble_student(load_model("bundled")[0], tmp_path)
    assert student.config.num_hidden_layers == StudentSpec.trunk + 1
    # the same teacher shards, training on tool calls only: the one transcript (an answer from a tool output) is
    # left out of training and still measured on dev
    assert distill_main(["--examples", "2", "--dev", "1", "--tool-examples", "1", "--tool-kinds", "tool_call",
                         "--engine-prompts", "1", "--epochs", "1", "--rank", "4", "--top", "17",
                         "--teacher-cache", str(tmp_path / "teacher"), "--out", str(tmp_path / "calls")]) == 0
    calls = json.loads((tmp_path / "calls" / "report.json").read_text())
    assert calls["train_records"] == 2 and calls["dev_records"] == 2 and "tool_call" in calls["spec"]["extra"]["data"]


def test_distill_drafter_trains_on_long_documents_read_through_an_excerpt(tmp_path):
    code = distill_main(["--examples", "0", "--dev", "0", "--tool-examples", "0", "--documents", "4",
                         "--dev-documents", "1", "--written", "2", "--document-tokens", "300", "900",
                         "--engine-prompts", "1", "--epochs", "1", "--rank", "4", "--top", "17", "--out", str(tmp_path)])
    assert code == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert 1 <= report["train_records"] <= 4  # a reply that misses the planted value in its excerpt is dropped
    assert set(report["dev_by_kind"]) <= {"doc_fact", "doc_section", "doc_absent"}
    sources = report["sources"]
    assert sources["paragraphs"]["verifier-written"] >= 1 and sources["paragraphs"]["stdlib docstrings"] > 500
    assert all(licence for _, licence in sources["distributions"])
    assert "long documents" in report["spec"]["extra"]["data"]


def test_the_long_document_drafter_loads_by_name_and_its_report_names_every_source():
    from asymspec_agents.training.distill.documents import SOURCES

    folder = STUDENTS["bundled-agent-small-long"]
    report = json.loads((folder / "report.json").read_text())
    assert set(report["sources"]["sources"]) == set(SOURCES)
    assert all(count > 0 for count in report["sources"]["paragraphs"].values())
    assert report["sources"]["distributions"] and all(licence for _, licence in report["sources"]["distributions"])
    student, _ = load_model("bundled-agent-small-long")
    assert student.config.num_hidden_layers == 6
    engine = AsymSpecEngine.shared("bundled-agent", "bundled-agent-small-long")
    assert engine.drafter is not None and engine.drafter.config.num_hidden_layers == 6
