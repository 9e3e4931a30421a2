"""Training a drafter to be rejected at decision points, on tiny random models (issue 7 §3)."""

import json

import pytest
import torch

from asymspec_agents import AsymSpecEngine
from asymspec_agents.engine import GenerationConfig
from asymspec_agents.errors import ConfigError, ModelLoadError
from asymspec_agents.models import load_model, merge_adapter
from asymspec_agents.training import agent_transcripts, agreement, check_lossless, decision_positions, mine_pairs
from asymspec_agents.training.dpo import TrainSettings, train_adversarial
from asymspec_agents.training.evaluate import lossless_prompts
from asymspec_agents.training.mining import _pick_chosen

CONTEXT = 48


@pytest.fixture(scope="module")
def transcripts(pair):
    return agent_transcripts(pair.tokenizer, 3, seed=0, tools_per_item=2)


@pytest.fixture(scope="module")
def trained(same_pair, transcripts, tmp_path_factory):
    pairs = mine_pairs(same_pair.verifier, same_pair.tokenizer, transcripts, context_tokens=CONTEXT, progress=False)
    out = tmp_path_factory.mktemp("adapter")
    before = [p.clone() for p in same_pair.drafter.parameters()]
    report = train_adversarial(same_pair.drafter, same_pair.tokenizer, pairs, out,
                               TrainSettings(steps=3, batch_size=2, learning_rate=5e-3, lora_layers=None), progress=False)
    return pairs, out, report, before


def test_transcripts_tag_the_tool_name_and_the_final_answer(pair, transcripts):
    tok = pair.tokenizer
    for transcript in transcripts:
        tagged = decision_positions(transcript, tok)
        assert set(tagged) <= set(transcript.assistant_positions())
        first_letters = [tok.decode(transcript.ids[j:j + len(transcript.answer)]) for j in tagged]
        assert transcript.answer in first_letters  # the tool name inside the call, and after "Final Answer: "
        assert first_letters.count(transcript.answer) == 2


def test_mining_is_deterministic_and_pairs_sit_at_tagged_positions(pair, transcripts):
    first = mine_pairs(pair.verifier, pair.tokenizer, transcripts, context_tokens=CONTEXT, anchors=True, progress=False)
    again = mine_pairs(pair.verifier, pair.tokenizer, transcripts, context_tokens=CONTEXT, anchors=True, progress=False)
    assert [p.to_dict() for p in first] == [p.to_dict() for p in again]
    expected = [(i, j) for i, t in enumerate(transcripts) for j in decision_positions(t, pair.tokenizer)]
    assert [(p.transcript, p.position) for p in first if p.kind != "anchor"] == expected and expected
    for p in first:
        ids = transcripts[p.transcript].ids
        assert p.prompt_ids == ids[p.position - CONTEXT:p.position]
        with torch.no_grad():
            top = int(pair.verifier(torch.tensor([p.prompt_ids])).logits[0, -1].argmax())
        if p.kind == "anchor":  # right after a decision point: keep the verifier's choice
            assert (p.transcript, p.position - 1) in expected and p.chosen_ids == [top]
            assert p.rejected_ids != p.chosen_ids and p.rejected_logprob < p.chosen_logprob
        else:
            assert p.rejected_ids == [top]  # the verifier's own choice
            assert p.chosen_ids != p.rejected_ids and p.chosen_logprob < p.rejected_logprob
    without = mine_pairs(pair.verifier, pair.tokenizer, transcripts, context_tokens=CONTEXT, anchors=False, progress=False)
    assert [p.to_dict() for p in without] == [p.to_dict() for p in first if p.kind != "anchor"]


def test_tool_name_pairs_choose_an_offered_tool(pair, transcripts):
    pairs = mine_pairs(pair.verifier, pair.tokenizer, transcripts, context_tokens=CONTEXT, progress=False)
    tool_pairs = [p for p in pairs if p.kind == "tool_name"]
    assert tool_pairs
    for p in tool_pairs:
        offered = {pair.tokenizer(n, add_special_tokens=False)["input_ids"][0] for n in transcripts[p.transcript].tool_names}
        assert p.chosen_ids[0] in offered


def test_chosen_is_the_least_likely_wrong_candidate_else_the_last_of_top_k():
    log_p = torch.log_softmax(torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0, 0.0]), dim=-1)
    assert _pick_chosen(log_p, [0, 1, 3], top_k=3) == (3, "tool_name")
    assert _pick_chosen(log_p, [0], top_k=3) == (2, "top_k")  # the only candidate is the verifier's own top
    assert _pick_chosen(log_p, [], top_k=5) == (4, "top_k")


def test_agreement_of_a_drafter_with_itself_is_total(pair, transcripts):
    report = agreement(pair.verifier, pair.verifier, pair.tokenizer, transcripts, progress=False)
    assert report.decision_points == sum(len(decision_positions(t, pair.tokenizer)) for t in transcripts)
    assert report.decision_rejection_rate == 0.0 and report.other_acceptance_rate == 1.0
    positions = sum(len(t.assistant_positions()) for t in transcripts)
    assert report.decision_points + report.other_positions == positions


def test_training_raises_the_chosen_margin_and_leaves_the_drafter_untouched(same_pair, trained):
    pairs, out, report, before = trained
    assert (out / "adapter_config.json").is_file()
    meta = json.loads((out / "asymspec_adapter.json").read_text())
    assert meta["settings"]["steps"] == 3 and report.pairs == len(pairs) and len(report.losses) == 3
    assert all(torch.equal(a, b) for a, b in zip(before, same_pair.drafter.parameters()))  # trained a copy
    merged = merge_adapter(same_pair.drafter, out)
    margin_before, margin_after = _margin(same_pair.drafter, pairs), _margin(merged, pairs)
    assert margin_after > margin_before + 0.05  # DPO moved probability from the verifier's choice to the framing


def test_trained_drafter_keeps_greedy_output_identical_to_the_verifier(same_pair, transcripts, trained):
    merged = merge_adapter(same_pair.drafter, trained[1])
    prompts = lossless_prompts(transcripts, same_pair.tokenizer)
    report = check_lossless(same_pair.verifier, merged, same_pair.tokenizer, prompts, max_new_tokens=12, k=4, progress=False)
    assert report.prompts == len(transcripts) and report.lossless, report.mismatches
    assert report.drafted > 0


def test_load_model_merges_a_saved_adapter(same_pair, trained, tmp_path):
    folder = tmp_path / "tiny"
    same_pair.drafter.save_pretrained(folder)
    same_pair.tokenizer.save_pretrained(folder)
    plain, tok = load_model(folder)
    adapted, _ = load_model(folder, adapter=trained[1])
    assert adapted is not plain and load_model(folder, adapter=trained[1])[0] is adapted
    ids = torch.tensor([trained[0][0].prompt_ids])
    with torch.no_grad():
        assert torch.allclose(adapted(ids).logits, merge_adapter(same_pair.drafter, trained[1])(ids).logits, atol=1e-5)
        assert not torch.allclose(adapted(ids).logits, plain(ids).logits, atol=1e-4)
    engine = AsymSpecEngine(same_pair.verifier, adapted, tok)
    config = GenerationConfig(mode="symmetric", decisions=None, k_max=4, adaptive_k=False, max_new_tokens=10)
    prompt = trained[0][0].prompt_ids
    assert engine.generate(prompt, config=config).token_ids == engine.generate(prompt, config=config, mode="compressed").token_ids


def test_pipeline_runs_end_to_end_and_writes_its_report(pair, tmp_path, capsys):
    from asymspec_agents.training.adversarial import RunSettings, print_report, run

    report = run(pair.verifier, pair.drafter, pair.tokenizer, tmp_path,
                 RunSettings(train_items=2, eval_items=2, lossless_prompts=1, tools_per_item=2, context_tokens=CONTEXT),
                 TrainSettings(steps=2, batch_size=2, lora_layers=1), progress=False)
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["pairs"] == report["pairs"] > 0 and saved["training"]["steps"] == 2
    assert saved["held_out"]["after"]["decision_points"] > 0
    assert saved["lossless"]["after"]["lossless"] and saved["lossless"]["before"]["lossless"]
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert len((tmp_path / "pairs.jsonl").read_text().splitlines()) == report["pairs"]
    print_report(report)
    assert "rejection at decision points" in capsys.readouterr().out


def test_errors_say_what_to_do(pair, tmp_path):
    with pytest.raises(ConfigError, match="decision points"):
        train_adversarial(pair.drafter, pair.tokenizer, [], tmp_path)
    with pytest.raises(ModelLoadError, match="adapter_config.json"):
        merge_adapter(pair.drafter, tmp_path)


def test_cli_requires_the_adversarial_flag(capsys):
    from asymspec_agents.cli import main

    with pytest.raises(SystemExit):
        main(["train-drafter", "--steps", "1"])
    assert "--adversarial" in capsys.readouterr().err


def _margin(model, pairs) -> float:
    """Mean over pairs of log π(chosen) − log π(rejected) at the decision point."""
    total = 0.0
    with torch.no_grad():
        for p in pairs:
            log_p = torch.log_softmax(model(torch.tensor([p.prompt_ids])).logits[0, -1], dim=-1)
            total += float(log_p[p.chosen_ids[0]] - log_p[p.rejected_ids[0]])
    return total / len(pairs)
