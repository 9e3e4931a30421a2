"""A drafter trained by DPO to be rejected at decision points, on the bundled SmolLM2-135M-Instruct (issue 7 §3).

The drafter starts as the verifier itself (every proposal accepted), is trained for a couple dozen LoRA steps on
CPU, and is then scored on held-out transcripts whose target tools never occur in training.
"""

import pytest

from asymspec_agents.training.adversarial import RunSettings, run
from asymspec_agents.training.dpo import TrainSettings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def report(bundled, tmp_path_factory):
    model, tokenizer = bundled
    return run(model, model, tokenizer, tmp_path_factory.mktemp("adversarial"),
               RunSettings(train_items=12, eval_items=4, lossless_prompts=2),
               TrainSettings(steps=20, batch_size=2, learning_rate=7e-4), progress=False)


def test_verifier_rejects_the_trained_drafter_at_held_out_decision_points(report):
    before, after = report["held_out"]["before"], report["held_out"]["after"]
    assert before["decision_points"] >= 8
    assert before["decision_rejection_rate"] == 0.0  # the untrained drafter is the verifier
    assert after["decision_rejection_rate"] >= 0.5  # measured 75% (9/12) on this CPU


def test_acceptance_elsewhere_drops_little(report):
    before, after = report["held_out"]["before"], report["held_out"]["after"]
    assert before["other_acceptance_rate"] == 1.0
    assert after["other_acceptance_rate"] >= 0.75  # measured 84% (112/134) on this CPU


def test_greedy_output_is_unchanged_with_the_trained_drafter(report):
    after = report["lossless"]["after"]
    assert after["prompts"] == 2 and after["lossless"], after["mismatches"]
    assert after["drafted"] > 0
