"""The math of one verification block (DESIGN §3), as pure functions on float32 tensors.

Vocabulary used throughout (as in vLLM's rejection sampler):
- a draft token `x_i` is proposed by the drafter from `q_i`;
- it is *accepted* when the fused target `p'_i` agrees with it;
- the first rejected position emits a *correction* drawn by the verifier (the residual of `p'_i` over `q_i`);
- when every draft token is accepted, a *bonus* token is drawn from `p'_{k+1}`.

Shapes: rows are draft positions, columns the shared vocabulary: `[n, vocab]`.
"""

from __future__ import annotations

import math

import torch


def fuse(target: torch.Tensor, delta_: torch.Tensor, beta: float) -> torch.Tensor:
    """t' = t + β·δ. With β = 0 the verifier's logits come back untouched (bit for bit)."""
    if beta == 0:
        return target
    return target + beta * delta_


def delta(full: torch.Tensor, comp: torch.Tensor) -> torch.Tensor:
    """What compression threw away, as the drafter sees it: log_softmax(a) − log_softmax(b)."""
    return torch.log_softmax(full, dim=-1) - torch.log_softmax(comp, dim=-1)


def jsd(full: torch.Tensor, comp: torch.Tensor) -> torch.Tensor:
    """Jensen–Shannon divergence of softmax(full) and softmax(comp) per row, natural log, in [0, ln 2]. `[n]`"""
    log_p = torch.log_softmax(full, dim=-1)
    log_q = torch.log_softmax(comp, dim=-1)
    log_m = torch.logsumexp(torch.stack([log_p, log_q]), dim=0) - math.log(2.0)
    return (0.5 * (_kl(log_p, log_m) + _kl(log_q, log_m))).clamp(0.0, math.log(2.0))


def gated_gamma(gamma: float, divergence: torch.Tensor | None) -> torch.Tensor | float:
    """CDA gate: γ_eff = γ·exp(−D); where the views diverge, acceptance is relaxed."""
    if divergence is None:
        return gamma
    return gamma * torch.exp(-divergence)


def process(logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Temperature, then top-k, then top-p; filtered entries become −inf. Greedy (T=0) leaves logits as they are."""
    if temperature == 0:
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


def accept_greedy(target: torch.Tensor, drafts: torch.Tensor, gamma_eff) -> torch.Tensor:
    """Accept x_i iff p'_i(x_i) ≥ γ_eff(i)·max_v p'_i(v). Returns a bool mask `[k]`."""
    log_p = torch.log_softmax(target, dim=-1)
    chosen = log_p.gather(-1, drafts[:, None]).squeeze(-1)
    best = log_p.max(dim=-1).values
    return chosen >= best + torch.log(torch.as_tensor(gamma_eff, dtype=log_p.dtype))


def accept_sampling(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor, gamma_eff, uniforms: torch.Tensor) -> torch.Tensor:
    """Accept x_i with probability min(1, p'_i(x_i) / (γ_eff(i)·q_i(x_i))). `p`, `q`: probabilities `[k, vocab]`."""
    p_x = p.gather(-1, drafts[:, None]).squeeze(-1)
    q_x = q.gather(-1, drafts[:, None]).squeeze(-1)
    ratio = p_x / (torch.as_tensor(gamma_eff, dtype=p.dtype) * q_x)
    return uniforms < ratio.clamp(max=1.0)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p − q)), or p itself where that is all zero. `[vocab]` or `[n, vocab]`."""
    diff = (p - q).clamp(min=0.0)
    total = diff.sum(-1, keepdim=True)
    return torch.where(total > 0, diff / total.clamp(min=1e-30), p)


def leading_accepts(accepted: torch.Tensor) -> int:
    """How many draft tokens are accepted before the first rejection."""
    rejected = (~accepted).nonzero()
    return int(rejected[0]) if len(rejected) else int(accepted.numel())


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats per row; filtered (−inf) entries contribute nothing."""
    log_p = torch.log_softmax(logits, dim=-1)
    return -_kl(log_p, torch.zeros_like(log_p))


def _kl(log_p: torch.Tensor, log_m: torch.Tensor) -> torch.Tensor:
    """Σ p·(log p − log m), with 0·log 0 = 0 so masked entries stay finite."""
    p = log_p.exp()
    return torch.where(p > 0, p * (log_p - log_m), torch.zeros_like(p)).sum(-1)
