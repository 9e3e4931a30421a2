"""The bundled GGUF conversion and the `asymspec` command on the real model."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from asymspec_agents.models import bundled_gguf_path, load_model, resolve_source

pytestmark = pytest.mark.integration


def test_a_gguf_file_is_converted_once_into_the_cache_folder(tmp_path, monkeypatch, bundled):
    monkeypatch.setenv("ASYMSPEC_CACHE_DIR", str(tmp_path))
    folder, _ = resolve_source(bundled_gguf_path())
    assert folder.startswith(str(tmp_path)) and os.path.isfile(os.path.join(folder, "model.safetensors"))
    start = time.perf_counter()
    assert resolve_source(bundled_gguf_path())[0] == folder
    assert time.perf_counter() - start < 1.0  # found, not converted again
    converted, _ = load_model(folder)
    model, _ = bundled
    ids = torch.tensor([[1, 9690, 198]])
    with torch.inference_mode():
        assert torch.allclose(converted(ids).logits, model(ids).logits, atol=1e-5)


def test_the_default_pair_loaded_from_its_folders_gives_the_tokens_it_gives_by_name():
    """No default depends on a model's name: the same weights from folders decode the same reply."""
    from asymspec_agents import AsymSpecEngine
    from asymspec_agents.context import CompressionPolicy, DualContext, Passage, UserMessage

    by_name = AsymSpecEngine.from_pretrained()
    by_folder = AsymSpecEngine.from_pretrained(resolve_source("bundled-agent")[0], resolve_source("bundled-agent-small")[0])
    filler = " ".join(f"Section {i} of the facility notes lists routine upkeep of the building." for i in range(40))
    message = UserMessage("What is the access code of the server room?",
                          passages=[Passage(filler + " The access code of the server room is 5969. " + filler)])
    views = DualContext(by_name.tokenizer, CompressionPolicy(budgets={"passage": 96})).render([message])
    here = by_name.generate(views.full_ids, views.comp_ids, max_new_tokens=16)
    assert by_folder.generate(views.full_ids, views.comp_ids, max_new_tokens=16).token_ids == here.token_ids
    assert here.stats.drafted > 0


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "asymspec_agents.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_generate_command_prints_text_and_stats_as_json():
    run = cli("generate", "--prompt", "Name three primary colors.", "--max-new-tokens", "12", "--json",
              "--drafter", "bundled")  # the identical pair: its drafts are the verifier's own
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout.strip().splitlines()[-1])
    assert data["text"] and data["stats"]["new_tokens"] == 12 or data["finish_reason"] == "stop"
    assert data["stats"]["mode"] == "asymmetric" and data["stats"]["acceptance_rate"] > 0.5
    assert set(data["stats"]["streams"]) == {"S_full", "S_comp", "V_comp"}


def test_generate_with_a_passage_shows_the_default_pair_at_work(tmp_path):
    """The default pair (bundled-agent-small drafting) on a document the verifier reads compressed: δ carries what
    compression dropped, and the drafter's forwards cost less than the verifier's."""
    filler = " ".join(f"Section {i} of the facility notes lists routine upkeep of the building." for i in range(60))
    (tmp_path / "notes.txt").write_text(filler + " The access code of the server room is 5969. " + filler)
    run = cli("generate", "--passage", str(tmp_path / "notes.txt"), "--prompt", "What is the access code of the "
              "server room?", "--max-new-tokens", "16", "--json")
    assert run.returncode == 0, run.stderr
    stats = json.loads(run.stdout.strip().splitlines()[-1])["stats"]
    assert stats["prompt_tokens_full"] > 2 * stats["prompt_tokens_comp"]
    assert 0 < stats["acceptance_rate"] < 1 and stats["delta_abs_mean"] > 0
    assert stats["acceptance"] == "ratio"


def test_generate_with_a_retrieval_view_gives_the_drafter_the_selection_only(tmp_path):
    filler = " ".join(f"Section {i} of the facility notes lists routine upkeep of the building." for i in range(60))
    (tmp_path / "notes.txt").write_text(filler + " The access code of the server room is 5969. " + filler)
    run = cli("generate", "--passage", str(tmp_path / "notes.txt"), "--prompt", "What is the access code of the "
              "server room?", "--max-new-tokens", "16", "--json", "--drafter-budget", "64")
    assert run.returncode == 0, run.stderr
    stats = json.loads(run.stdout.strip().splitlines()[-1])["stats"]
    assert stats["prompt_tokens_full"] < stats["prompt_tokens_comp"] < 2000  # 64 selected vs 128 head/tail tokens
    refused = cli("generate", "--prompt", "x", "--drafter-budget", "64")
    assert refused.returncode == 2 and "give --passage FILE too" in refused.stderr


def test_generate_command_prints_a_stats_table():
    run = cli("generate", "--prompt", "Say hello.", "--max-new-tokens", "8", "--mode", "symmetric_full")
    assert run.returncode == 0, run.stderr
    assert "drafted / accepted" in run.stdout and "S_full" in run.stdout and "V_full" in run.stdout


def test_generate_command_reports_bad_settings_clearly():
    run = cli("generate", "--prompt", "x", "--beta", "-1")
    assert run.returncode == 2
    assert "beta must be >= 0" in run.stderr


def test_generate_command_runs_the_heterogeneous_pair_and_says_it_bridges():
    run = cli("generate", "--verifier", "bundled-hetero", "--prompt", "Name three primary colors.",
              "--max-new-tokens", "12", "--json")
    assert run.returncode == 0, run.stderr
    assert "bridging over" in run.stderr and "49152 vs 262144" in run.stderr
    data = json.loads(run.stdout.strip().splitlines()[-1])
    assert data["stats"]["drafted"] > 0 and set(data["stats"]["streams"]) == {"S_full", "S_comp", "V_comp"}


def test_pair_describes_the_default_pair_and_a_bridged_one_from_configs_alone():
    default = cli("pair")
    assert default.returncode == 0, default.stderr
    assert "bundled-agent-small" in default.stdout and "vocabulary: shared, 49152 tokens" in default.stdout
    assert all(len(line) <= 80 for line in default.stdout.splitlines())
    hetero = cli("pair", "bundled-hetero")
    assert hetero.returncode == 0 and "vocabulary: bridged over" in hetero.stdout, hetero.stderr
