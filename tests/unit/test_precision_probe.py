"""The precision probe's error measures on hand-made logits, and one run on a tiny model."""

import math

import pytest
import torch

from asymspec_agents.bench import precision
from asymspec_agents.testing import tiny_random_pair


def test_error_measures_on_hand_made_logits():
    reference = torch.tensor([2.0, 1.0, 0.0], dtype=torch.float64)
    acc = precision._zero()
    precision._add(acc, reference.clone(), reference)
    precision._add(acc, torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64), reference)
    row = precision._mean(acc)
    assert row["samples"] == 2 and row["max_abs"] == 2.0
    assert row["mean_abs"] == pytest.approx((0 + 4 / 3) / 2)
    assert row["argmax_flip_rate"] == 0.5
    p = torch.softmax(reference, -1)
    kl = float((p * (torch.log_softmax(reference, -1) - torch.log_softmax(reference.flip(0), -1))).sum())
    assert row["kl"] == pytest.approx(kl / 2)
    assert math.isclose(precision._mean(precision._zero())["mean_abs"], 0.0)


def test_probe_on_a_tiny_model_orders_precisions_and_matches_slot_zero_at_k_one():
    model = tiny_random_pair(seed=0).verifier
    window = list(range(3, 3 + 40 + precision.SLOTS))
    report = precision.probe(model, [window], 40, ["float32", "int8"])
    fp32, int8 = report["per_slot"]["float32"], report["per_slot"]["int8"]
    assert len(fp32) == precision.SLOTS and fp32[0]["samples"] == precision.SLOTS
    assert max(r["mean_abs"] for r in fp32) < 1e-4
    assert min(r["mean_abs"] for r in int8) > 10 * max(r["mean_abs"] for r in fp32)
    # slot 0 of every block decodes position 0, as sequential decoding does (up to batch-shape float noise)
    assert int8[0]["mean_abs"] == pytest.approx(report["sequential"]["int8"][0]["mean_abs"], rel=1e-3)
