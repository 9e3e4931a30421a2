"""The math of one verification block (docs/design.md §3), as pure functions on float32 tensors.

Vocabulary used throughout (as in vLLM's rejection sampler):
- a draft token `x_i` is proposed by the drafter from `q_i`;
- it is *accepted* or not by an acceptance rule (acceptance.py);
- the first rejected position emits a *correction* drawn by the verifier, from the fused target `p'_i`;
- when every draft token is accepted, a *bonus* token is drawn from the verifier (fused or not).

Shapes: rows are draft positions, columns the shared vocabulary: `[n, vocab]`.
"""

from __future__ import annotations

import math

import torch

# Temperatures below this decode greedily, as in vLLM: logits divided by them overflow to inf, softmax to NaN.
GREEDY_BELOW = 1e-5


def fuse(target: torch.Tensor, delta_: torch.Tensor, beta: float) -> torch.Tensor:
    """t' = t + β·δ. With β = 0 the verifier's logits come back untouched (bit for bit)."""
    if beta == 0:
        return target
    return target + beta * delta_


def delta_from(source: str, full: torch.Tensor, comp: torch.Tensor, target: torch.Tensor | None = None,
               read=None) -> torch.Tensor:
    """δ by source, as the authors ablate it: "contrast" a − b, "full_only" a, "scd" t − b (log-probabilities).

    `read(name, log_p)`: how the log-probabilities of "full", "comp" or "target" are read (a server's truncated
    rows read each token they did not return at its bound, loop.py); default: as they are."""
    def log_p(rows: torch.Tensor, name: str) -> torch.Tensor:
        out = torch.log_softmax(rows, dim=-1)
        return out if read is None else read(name, out)

    if source == "contrast":
        return log_p(full, "full") - log_p(comp, "comp")
    if source == "full_only":
        return log_p(full, "full")
    if source == "scd":
        return log_p(target, "target") - log_p(comp, "comp")
    raise ValueError(f"unknown δ source {source!r}")


def jsd(full: torch.Tensor, comp: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence of softmax(full) and softmax(comp) per row, natural log, in [0, ln 2]. `[n]`"""
    log_p = torch.log_softmax(full, dim=-1)
    log_q = torch.log_softmax(comp, dim=-1)
    log_m = torch.logsumexp(torch.stack([log_p, log_q]), dim=0) - math.log(2.0)
    return (0.5 * (_kl(log_p, log_m) + _kl(log_q, log_m))).clamp(0.0, math.log(2.0))


def kl(full: torch.Tensor, comp: torch.Tensor) -> torch.Tensor:
    """KL(softmax(full) ‖ softmax(comp)) per row, natural log, ≥ 0. `[n]`"""
    return _kl(torch.log_softmax(full, dim=-1), torch.log_softmax(comp, dim=-1)).clamp(min=0.0)


def gate_exponent(kind: str, full: torch.Tensor, comp: torch.Tensor, lam: float = 1.0,
                  jsd_rows: torch.Tensor | None = None) -> torch.Tensor:
    """The exponent D of the CDA gate γ_eff = γ·exp(−D), per row (draft position 0, 1, …). `[n]`

    "jsd" λ·JSD (the paper's), "kl" λ·KL, "jsd_pos" JSD/(pos+1), "kl_vnorm" KL/log V, "kl_hbase" KL/H(p_S(·|comp));
    the last three have no λ, as in the authors' sampler. `jsd_rows`: JSD(full, comp) if the caller has it."""
    if kind in ("jsd", "jsd_pos"):
        divergence = jsd(full, comp) if jsd_rows is None else jsd_rows
        if kind == "jsd":
            return lam * divergence
        return divergence / torch.arange(1, len(divergence) + 1, dtype=divergence.dtype, device=divergence.device)
    divergence = kl(full, comp)
    if kind == "kl":
        return lam * divergence
    if kind == "kl_vnorm":
        return divergence / math.log(full.shape[-1])
    if kind == "kl_hbase":
        return divergence / entropy(comp).clamp(min=1e-4)
    raise ValueError(f"unknown divergence {kind!r}")


def gated_gamma(gamma: float, exponent: torch.Tensor | None) -> torch.Tensor | float:
    """CDA gate: γ_eff = γ·exp(−D); where the views diverge, acceptance is relaxed."""
    if exponent is None:
        return gamma
    return gamma * torch.exp(-exponent)


def process(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Temperature, then top-k, then top-p; filtered entries become −inf. Greedy (T below `GREEDY_BELOW`) leaves
    logits as they are."""
    if temperature < GREEDY_BELOW:
        return logits
    logits = logits / temperature
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(-1)
        # drop a token once the mass before it already reaches top_p; the top token always stays
        drop_sorted = (cumulative - torch.softmax(sorted_logits, dim=-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p − q)), or p itself where that is all zero. `[vocab]` or `[n, vocab]`."""
    diff = (p - q).clamp(min=0.0)
    total = diff.sum(-1, keepdim=True)
    return torch.where(total > 0, diff / total.clamp(min=1e-30), p)


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats per row; filtered (−inf) entries contribute nothing."""
    log_p = torch.log_softmax(logits, dim=-1)
    return -_kl(log_p, torch.zeros_like(log_p))


def _kl(log_p: torch.Tensor, log_m: torch.Tensor) -> torch.Tensor:
    """Σ p·(log p − log m), with 0·log 0 = 0 so masked entries stay finite."""
    p = log_p.exp()
    return torch.where(p > 0, p * (log_p - log_m), torch.zeros_like(p)).sum(-1)
