"""A reference AsymSpec decoder for tests: every position recomputed with plain full forwards (no caches, no KV
streams, no rollback), each acceptance rule written out from its formula, greedy only.

It mirrors the engine's block schedule (fixed k = k_max, capped by the tokens left; drafting stops at EOS) and
nothing else, so the engine's tokens equal its tokens exactly when caches, rollback, the bonus and the rules are
right. Written independently of `asymspec_agents.engine` on purpose: it imports none of it.
"""

from __future__ import annotations

import math

import torch


def logits(model, ids: list[int]) -> torch.Tensor:
    """Float32 logits for every position of `ids`, from one forward without a cache. `[len(ids), vocab]`"""
    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()


def gate_exponent(divergence: str, a: torch.Tensor, b: torch.Tensor, lam: float, position: int) -> float:
    pa, pb = torch.softmax(a, -1), torch.softmax(b, -1)
    la, lb = torch.log_softmax(a, -1), torch.log_softmax(b, -1)
    kl = float(torch.where(pa > 0, pa * (la - lb), torch.zeros_like(pa)).sum())
    m = 0.5 * (pa + pb)
    js = 0.5 * float(torch.where(pa > 0, pa * (la - m.log()), torch.zeros_like(pa)).sum()
                     + torch.where(pb > 0, pb * (lb - m.log()), torch.zeros_like(pb)).sum())
    if divergence == "jsd":
        return lam * js
    if divergence == "jsd_pos":
        return js / (position + 1)
    if divergence == "kl":
        return lam * kl
    if divergence == "kl_vnorm":
        return kl / math.log(a.numel())
    if divergence == "kl_hbase":
        entropy = float(-(torch.where(pb > 0, pb * lb, torch.zeros_like(pb))).sum())
        return kl / max(entropy, 1e-4)
    raise ValueError(divergence)


def with_copy(row: torch.Tensor, prompt: list[int], sequence: list[int], weight: float) -> torch.Tensor:
    """The copy head written out: find the longest n-gram (3 to 8 tokens) of the reply (what `sequence` holds past
    `prompt`) ending `sequence` that also occurs in `prompt` with a token after it; mix the distribution of those
    next tokens into softmax(row) with `weight`."""
    if not weight:
        return row
    for n in range(min(8, len(sequence) - len(prompt)), 2, -1):
        tail = sequence[-n:]
        following = [prompt[j + n] for j in range(len(prompt) - n) if prompt[j:j + n] == tail]
        if following:
            copy = torch.zeros_like(row)
            for token in following:
                copy[token] += 1 / len(following)
            return torch.log((1 - weight) * torch.softmax(row, -1) + weight * copy)
    return row


def delta(source: str, t: torch.Tensor, a: torch.Tensor | None, b: torch.Tensor) -> torch.Tensor:
    if source == "contrast":
        return torch.log_softmax(a, -1) - torch.log_softmax(b, -1)
    if source == "full_only":
        return torch.log_softmax(a, -1)
    if source == "scd":
        return torch.log_softmax(t, -1) - torch.log_softmax(b, -1)
    raise ValueError(source)


def decode(verifier, drafter, full: list[int], comp: list[int], *, acceptance: str, max_new_tokens: int,
           eos_ids: set[int], beta: float = 1.0, gamma: float = 0.5, k_max: int = 2, cda: bool = True,
           divergence: str = "jsd", cda_lambda: float = 1.0, delta_source: str = "contrast",
           fuse_bonus: bool = False, copy_weight: float = 0.0) -> list[int]:
    """Greedy AsymSpec (drafter on `full`, verifier on `comp`) with the "ratio" or "fused" rule."""
    out: list[int] = []

    def drafter_rows(prompt: list[int], sequence: list[int], start: int) -> list[torch.Tensor]:
        """The drafter's rows (copy head included) after each prefix sequence[:i], i from `start` + 1 on."""
        rows = logits(drafter, sequence)[start:]
        return [with_copy(row, prompt, sequence[:start + 1 + i], copy_weight) for i, row in enumerate(rows)]

    def fused_row(t, a, b):
        return t + beta * delta(delta_source, t, a, b) if beta else t

    while len(out) < max_new_tokens:
        k = min(k_max, max_new_tokens - len(out) - 1)
        drafts, a_rows = [], []
        for _ in range(k):
            sequence = full + out + drafts
            a_rows.append(drafter_rows(full, sequence, len(sequence) - 1)[0])
            drafts.append(int(a_rows[-1].argmax()))
            if drafts[-1] in eos_ids:
                break
        k = len(drafts)
        n_prefix = len(comp) + len(out)
        t_rows = logits(verifier, comp + out + drafts)[n_prefix - 1:]  # [k+1]
        b_rows = drafter_rows(comp, comp + out + drafts, n_prefix - 1)
        committed, emitted = [], None
        for i, d in enumerate(drafts):
            a, b, t = a_rows[i], b_rows[i], t_rows[i]
            g = gamma * math.exp(-gate_exponent(divergence, a, b, cda_lambda, i)) if cda else gamma
            fused = fused_row(t, a, b)
            if acceptance == "ratio":
                ok = float(torch.softmax(t, -1)[d]) > g * float(torch.softmax(b, -1)[d])
            else:
                log_p = torch.log_softmax(fused, -1)
                ok = float(log_p[d]) >= float(log_p.max()) + math.log(g)
            if not ok:
                emitted = int(fused.argmax())
                break
            committed.append(d)
        else:
            if not (drafts and drafts[-1] in eos_ids):
                if k == 0 or fuse_bonus:  # a block without drafts emits from the fused target, as a rejection does
                    sequence = full + out + drafts
                    a = drafter_rows(full, sequence, len(sequence) - 1)[0] if delta_source != "scd" else None
                    emitted = int(fused_row(t_rows[k], a, b_rows[k]).argmax())
                else:
                    emitted = int(t_rows[k].argmax())
        if emitted is not None:
            committed.append(emitted)
        for token in committed:
            out.append(token)
            if token in eos_ids or len(out) >= max_new_tokens:
                return out
    return out
