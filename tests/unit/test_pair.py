"""`asymspec pair`: a pair described from configs and tokenizers only (tiny random models saved to folders here; the
bundled names in tests/integration/test_models_and_cli.py)."""

import json

import pytest

from asymspec_agents import pair
from asymspec_agents.cli import main as asymspec
from asymspec_agents.engine.config import GenerationConfig
from asymspec_agents.testing import byte_tokenizer, tiny_random_model


def saved(folder, tokenizer, layers: int, seed: int = 0):
    model = tiny_random_model(len(tokenizer), seed=seed, layers=layers)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_folders_sharing_a_vocabulary_report_windows_costs_and_the_break_even(tmp_path):
    tokenizer = byte_tokenizer()
    verifier, drafter = saved(tmp_path / "v", tokenizer, 4), saved(tmp_path / "d", tokenizer, 1, seed=1)
    report = pair.describe(verifier, drafter)
    assert report["vocabulary"] == {"shared": True, "tokens": len(tokenizer)}
    assert report["window"] == report["verifier"]["window"] == 4096
    cost = report["drafter_cost"]
    assert 0 < cost < 1 and report["pays_from_compression"] == pytest.approx((1 + cost) / (1 - cost))
    assert report["settings"]["acceptance"] == GenerationConfig().resolved().acceptance
    assert all(len(line) <= 80 for line in pair.render(report).splitlines())


def test_more_layers_cost_more_flops_per_token_and_context_adds_attention(tmp_path):
    from transformers import AutoConfig

    tokenizer = byte_tokenizer()
    small, large = (AutoConfig.from_pretrained(saved(tmp_path / name, tokenizer, layers))
                    for name, layers in (("s", 1), ("l", 4)))
    assert pair.flops_per_token(large) > pair.flops_per_token(small)
    assert pair.flops_per_token(small, context=2048) > pair.flops_per_token(small, context=0)


def test_a_drafter_of_another_vocabulary_is_reported_as_bridged(tmp_path):
    verifier = saved(tmp_path / "v", byte_tokenizer(), 2)
    drafter = saved(tmp_path / "d", byte_tokenizer(merges=["th", "in", "er"]), 1)
    report = pair.describe(verifier, drafter)
    assert not report["vocabulary"]["shared"] and report["vocabulary"]["tokens"] >= 256


def test_a_drafter_that_costs_as_much_as_the_verifier_never_pays():
    assert pair.break_even(1.0) is None and pair.break_even(None) is None and pair.break_even(0.2) == pytest.approx(1.5)


def test_the_command_prints_the_report_and_its_json(tmp_path, capsys):
    tokenizer = byte_tokenizer()
    verifier, drafter = saved(tmp_path / "v", tokenizer, 2), saved(tmp_path / "d", tokenizer, 1, seed=1)
    assert asymspec(["pair", verifier, drafter, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vocabulary"]["shared"]
    assert asymspec(["pair", verifier, "none"]) == 0
    assert "the verifier decodes alone" in capsys.readouterr().out


def test_an_unknown_verifier_with_auto_is_refused_with_the_projects_error(tmp_path, capsys):
    verifier = saved(tmp_path / "v", byte_tokenizer(), 1)
    assert asymspec(["pair", verifier]) == 2
    assert "drafter='auto' knows no drafter" in capsys.readouterr().err
