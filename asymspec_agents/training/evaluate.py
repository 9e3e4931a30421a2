"""How the verifier treats a drafter's proposals, at decision points and elsewhere; and losslessness.

`agreement` is teacher-forced over held-out transcripts: at every assistant position the drafter proposes its
greedy token and the verifier accepts it by the engine's own greedy rule (`FusedThreshold.accept_greedy`, γ = 1):
exactly the test a draft token at that position meets in a block of greedy speculative decoding, whatever its
slot. `check_lossless` decodes with the engine itself (fixed blocks, no decision scheduling) and compares the
speculative greedy output with the verifier decoding alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch
from tqdm.auto import tqdm

from ..engine import AsymSpecEngine, DecisionPolicy, GenerationConfig
from ..engine.acceptance import FusedThreshold, Verification
from .transcripts import Transcript, decision_positions


@dataclass
class AgreementReport:
    decision_points: int = 0
    decision_rejected: int = 0  # drafter's proposal rejected by the verifier at a decision point
    other_positions: int = 0
    other_accepted: int = 0  # drafter's proposal accepted at a non-decision assistant position
    next_positions: int = 0  # of the non-decision positions, those right after a decision point
    next_accepted: int = 0

    @property
    def decision_rejection_rate(self) -> float:
        return self.decision_rejected / self.decision_points if self.decision_points else 0.0

    @property
    def other_acceptance_rate(self) -> float:
        return self.other_accepted / self.other_positions if self.other_positions else 0.0

    @property
    def next_acceptance_rate(self) -> float:
        return self.next_accepted / self.next_positions if self.next_positions else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "decision_rejection_rate": self.decision_rejection_rate,
                "other_acceptance_rate": self.other_acceptance_rate, "next_acceptance_rate": self.next_acceptance_rate}


@dataclass
class LosslessReport:
    prompts: int = 0
    identical: int = 0  # speculative greedy output == verifier-alone greedy output
    new_tokens: int = 0
    drafted: int = 0
    accepted: int = 0
    decision_tokens: int = 0  # decision points in the generated text (tagged after the fact)
    decision_tokens_from_drafts: int = 0  # of those, committed as an accepted draft token
    mismatches: list[dict] = field(default_factory=list)

    @property
    def lossless(self) -> bool:
        return self.prompts > 0 and self.identical == self.prompts

    def to_dict(self) -> dict:
        return {**asdict(self), "lossless": self.lossless,
                "acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0}


def agreement(verifier, drafter, tokenizer, transcripts: list[Transcript], policy: DecisionPolicy | None = None, *,
              verifier_rows: list[torch.Tensor] | None = None, progress: bool = True) -> AgreementReport:
    """Teacher-forced acceptance of the drafter's greedy proposals. `verifier_rows`: the verifier's logits from
    `assistant_logits` (to reuse them across drafters)."""
    policy = policy or DecisionPolicy()
    verifier_rows = verifier_rows or assistant_logits(verifier, transcripts, progress=progress)
    report = AgreementReport()
    for transcript, t_rows in tqdm(list(zip(transcripts, verifier_rows)), desc="scoring drafter", unit="transcript",
                                   disable=not progress):
        positions = transcript.assistant_positions()
        a_rows = t_rows if drafter is verifier else assistant_logits(drafter, [transcript], progress=False)[0]
        drafts = a_rows.argmax(dim=-1)
        accepted = FusedThreshold().accept_greedy(Verification(drafts, t_rows, t_rows), 1.0)  # [positions]
        tagged = set(decision_positions(transcript, tokenizer, policy))
        for j, ok in zip(positions, accepted.tolist()):
            if j in tagged:
                report.decision_points += 1
                report.decision_rejected += not ok
            else:
                report.other_positions += 1
                report.other_accepted += ok
                if j - 1 in tagged:
                    report.next_positions += 1
                    report.next_accepted += ok
    return report


@torch.no_grad()
def assistant_logits(model, transcripts: list[Transcript], *, progress: bool = False) -> list[torch.Tensor]:
    """Per transcript, the model's next-token logits before each assistant position: `[positions, vocab]`."""
    out = []
    device = next(model.parameters()).device
    for transcript in tqdm(transcripts, desc="forward over transcripts", unit="transcript", disable=not progress):
        positions = transcript.assistant_positions()
        end = positions[-1]
        logits = model(torch.tensor([transcript.ids[:end]], device=device)).logits[0].float()  # [end, vocab]
        out.append(logits[torch.tensor(positions, device=device) - 1])
    return out


def lossless_prompts(transcripts: list[Transcript], tokenizer, policy: DecisionPolicy | None = None, *,
                     lead: int = 1) -> list[list[int]]:
    """Prompts that stop `lead` tokens before each transcript's first decision point, so that the decision is
    generated inside a block rather than at its start."""
    prompts = []
    for transcript in transcripts:
        tagged = decision_positions(transcript, tokenizer, policy)
        if tagged:
            prompts.append(transcript.ids[:max(transcript.spans[0][0], tagged[0] - lead)])
    return prompts


def check_lossless(verifier, drafter, tokenizer, prompts: list[list[int]], policy: DecisionPolicy | None = None, *,
                   max_new_tokens: int = 16, k: int = 4, progress: bool = True) -> LosslessReport:
    """Greedy speculative decoding with fixed blocks of `k` drafts and no decision scheduling (a fixed-block
    serving stack), against the verifier alone, token for token."""
    policy = policy or DecisionPolicy()
    engine = AsymSpecEngine(verifier, drafter, tokenizer)
    base = dict(max_new_tokens=max_new_tokens, decisions=None, temperature=0.0)
    alone = GenerationConfig(mode="compressed", **base)
    speculative = GenerationConfig(mode="symmetric", k_max=k, adaptive_k=False, **base)
    report = LosslessReport()
    for prompt in tqdm(prompts, desc="losslessness", unit="prompt", disable=not progress):
        reference = engine.generate(prompt, config=alone)
        result = engine.generate(prompt, config=speculative)
        report.prompts += 1
        report.identical += result.token_ids == reference.token_ids
        if result.token_ids != reference.token_ids:
            report.mismatches.append({"verifier": tokenizer.decode(reference.token_ids), "speculative": tokenizer.decode(result.token_ids)})
        stats = result.stats
        report.new_tokens += stats.new_tokens
        report.drafted += stats.drafted
        report.accepted += stats.accepted
        lookback = policy.lookback_tokens
        for g, source in enumerate(stats.token_sources):
            ids = prompt + result.token_ids[:g]
            if policy.text_triggers(tokenizer.decode(ids[-lookback:])):
                report.decision_tokens += 1
                report.decision_tokens_from_drafts += source == "accepted"
    return report
