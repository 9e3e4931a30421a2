"""Exact reference distributions for the statistical tests of samplers (shared by the engine's sampling tests)."""

import torch


def two_token_distribution(model, prompt: list[int], top_k: int) -> dict[tuple[int, int], float]:
    """Exact probabilities of every 2-token continuation under `model` with temperature 1 and top-k."""
    probs = {}
    with torch.inference_mode():
        first = torch.softmax(_top_k(model(torch.tensor([prompt])).logits[0, -1], top_k), -1)
        for a in first.nonzero().flatten().tolist():
            second = torch.softmax(_top_k(model(torch.tensor([prompt + [a]])).logits[0, -1], top_k), -1)
            for b in second.nonzero().flatten().tolist():
                probs[(a, b)] = float(first[a] * second[b])
    return probs


def total_variation(samples: list[tuple], probs: dict[tuple, float]) -> float:
    counts = {}
    for s in samples:
        counts[s] = counts.get(s, 0) + 1
    keys = set(counts) | set(probs)
    return 0.5 * sum(abs(counts.get(k, 0) / len(samples) - probs.get(k, 0.0)) for k in keys)


def _top_k(logits: torch.Tensor, k: int) -> torch.Tensor:
    kth = torch.topk(logits, k).values[-1]
    return logits.masked_fill(logits < kth, float("-inf"))
