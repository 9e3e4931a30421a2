"""Acceptance rules: which draft tokens a verification block keeps, and what it emits where it stops.

One object per rule, as vLLM's rejection sampler has one method per rule; the decoding loop only builds a
`Verification` and asks the rule (docs/design.md §3 has the math of both):

- `VerifierRatio` ("ratio", the published AsymSpec rule): accept d_i iff p_V(d_i) > γ_eff(i)·p_S(d_i | comp), the
  verifier against the drafter reading the verifier's own view; only the emitted token is fused.
- `FusedThreshold` ("fused", this project's first rule): accept d_i iff p'(d_i) ≥ γ_eff(i)·max p' on the fused
  p' = softmax(t + β·δ); with γ = 1 and β = 0 it is exact speculative decoding.

Both emit the correction at the first rejected position from the fused target p'.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import fusion


@dataclass
class Verification:
    """One verification block as a rule reads it; rows are draft positions over the verifier's vocabulary.

    Both are grammar-masked; when sampling, `target` (and `base_at_draft`) are temperature-scaled only, while
    `fused`, which the emitted token is drawn from, is also top-k/top-p filtered."""

    drafts: torch.Tensor  # [k] draft token ids
    target: torch.Tensor  # [k, V] the verifier's logits t
    fused: torch.Tensor  # [k, V] t + β·δ (t itself where nothing is fused): what a rejection emits from
    base_at_draft: torch.Tensor | None = None  # [k] p_S(d_i | the verifier's view): what the ratio compares with
    proposal: torch.Tensor | None = None  # [k, V] q_i, the drafter's proposal probabilities (sampling only)

    def __len__(self) -> int:
        return len(self.drafts)


class FusedThreshold:
    name = "fused"
    needs_base = False

    def accept_greedy(self, v: Verification, gamma_eff) -> torch.Tensor:
        """d_i iff log p'(d_i) ≥ max log p' + log γ_eff(i). A bool mask `[k]`."""
        log_p = torch.log_softmax(v.fused, dim=-1)
        chosen = _at(log_p, v.drafts)
        return chosen >= log_p.max(dim=-1).values + torch.log(torch.as_tensor(gamma_eff, dtype=log_p.dtype))

    def accept_sampled(self, v: Verification, gamma_eff, uniforms: torch.Tensor) -> torch.Tensor:
        """d_i with probability min(1, p'(d_i) / (γ_eff(i)·q_i(d_i)))."""
        p = torch.softmax(v.fused, dim=-1)
        return uniforms < (_at(p, v.drafts) / (_gamma(gamma_eff, p) * _at(v.proposal, v.drafts))).clamp(max=1.0)

    def correction(self, v: Verification, i: int, greedy: bool, rng: torch.Generator) -> int:
        """argmax p'_i, or a draw from the residual normalize(max(0, p'_i − q_i)) (lossless when γ = 1, β = 0)."""
        if greedy:
            return int(v.fused[i].argmax())
        p = torch.softmax(v.fused[i], dim=-1)
        return int(torch.multinomial(fusion.residual(p, v.proposal[i]), 1, generator=rng))


class VerifierRatio:
    name = "ratio"
    needs_base = True

    def accept_greedy(self, v: Verification, gamma_eff) -> torch.Tensor:
        """d_i iff p_V(d_i) > γ_eff(i)·p_S(d_i | comp); equality rejects, as in the authors' kernel."""
        p_v = _at(torch.softmax(v.target, dim=-1), v.drafts)
        return p_v > _gamma(gamma_eff, p_v) * v.base_at_draft

    def accept_sampled(self, v: Verification, gamma_eff, uniforms: torch.Tensor) -> torch.Tensor:
        """Ours (the authors define no sampling form): d_i with probability min(1, p_V(d_i) / (γ_eff·p_S(d_i | comp)))."""
        p_v = _at(torch.softmax(v.target, dim=-1), v.drafts)
        ratio = p_v / (_gamma(gamma_eff, p_v) * v.base_at_draft).clamp(min=1e-30)
        return uniforms < ratio.clamp(max=1.0)

    def correction(self, v: Verification, i: int, greedy: bool, rng: torch.Generator) -> int:
        """argmax(t + β·δ) at the first rejected position (the authors'); sampling draws from softmax(t + β·δ)."""
        if greedy:
            return int(v.fused[i].argmax())
        return int(torch.multinomial(torch.softmax(v.fused[i], dim=-1), 1, generator=rng))


RULES = {rule.name: rule for rule in (VerifierRatio(), FusedThreshold())}


def leading_accepts(accepted: torch.Tensor) -> int:
    """How many draft tokens are accepted before the first rejection."""
    rejected = (~accepted).nonzero()
    return int(rejected[0]) if len(rejected) else int(accepted.numel())


def _at(rows: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return rows.gather(-1, ids[:, None]).squeeze(-1)


def _gamma(gamma_eff, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(gamma_eff, dtype=like.dtype, device=like.device)
