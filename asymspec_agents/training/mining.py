"""Mine DPO preference pairs at decision points.

At each tagged position j of a transcript the prompt is the context before j (its last `context_tokens`, if
set: far cheaper training on a CPU, and the decision cue is local), "rejected" is the verifier's own top token there, and
"chosen" is a framing the verifier gives low probability: the first token of an offered tool the verifier likes
least (a plausible wrong tool name) at tool-name positions, else the lowest-ranked of the verifier's top-k. A
drafter that learns to prefer "chosen" is rejected at decision points, so the verifier produces them itself.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import torch
from tqdm.auto import tqdm

from ..engine.decisions import TOOL_NAME, DecisionPolicy
from .transcripts import Transcript, decision_positions


@dataclass
class PreferencePair:
    prompt_ids: list[int]
    chosen_ids: list[int]  # a continuation the verifier gives low probability
    rejected_ids: list[int]  # the verifier's own top continuation
    transcript: int  # index of the transcript it came from
    position: int  # index in that transcript of the decision token
    kind: str  # "tool_name" (a plausible wrong tool), "top_k" (the last of the verifier's top-k) or "anchor"
    chosen_logprob: float  # the verifier's log-probabilities of both, at the position
    rejected_logprob: float

    def to_record(self) -> dict:
        """The pre-tokenized row `DPOTrainer`'s collator reads."""
        return {"prompt_ids": self.prompt_ids, "chosen_ids": self.chosen_ids, "rejected_ids": self.rejected_ids}

    def to_dict(self) -> dict:
        return asdict(self)


def mine_pairs(verifier, tokenizer, transcripts: list[Transcript], policy: DecisionPolicy | None = None, *,
               context_tokens: int | None = 32, top_k: int = 10, anchors: bool = False,
               progress: bool = True) -> list[PreferencePair]:
    """One pair per decision point of every transcript, in order; deterministic for fixed weights.

    `anchors`: also one "anchor" pair at the position right after each decision point (when it is not one
    itself), the other way round: chosen = the verifier's top token, rejected = the last of its top-k, meant to
    keep the drafter agreeing with the verifier where the decision cue is still in context. On the bundled model
    at equal steps and learning rate they kept more acceptance elsewhere but slowed learning at decision points
    much more, so they are off by default.
    """
    policy = policy or DecisionPolicy()
    sites = []
    for index, transcript in enumerate(transcripts):
        tagged = decision_positions(transcript, tokenizer, policy)
        drafted = set(transcript.assistant_positions())
        for j in tagged:
            sites.append((index, j, False))
            if anchors and j + 1 in drafted and j + 1 not in tagged:
                sites.append((index, j + 1, True))
    first_tokens = [_first_tokens(tokenizer, t.tool_names) for t in transcripts]
    prompts = [(transcripts[i].ids[max(0, j - context_tokens):j] if context_tokens else transcripts[i].ids[:j]) for i, j, _ in sites]
    rows = _next_token_logprobs(verifier, prompts, progress)
    pairs = []
    for (index, j, anchor), prompt, log_p in zip(sites, prompts, rows):
        ids = transcripts[index].ids
        top = int(log_p.argmax())
        if anchor:
            low = int(log_p.topk(max(2, top_k)).indices[-1])
            pairs.append(PreferencePair(prompt, [top], [low], index, j, "anchor", float(log_p[top]), float(log_p[low])))
            continue
        tool_site = re.search(TOOL_NAME, tokenizer.decode(ids[max(0, j - policy.lookback_tokens):j])) is not None
        chosen, kind = _pick_chosen(log_p, first_tokens[index] if tool_site else [], top_k)
        pairs.append(PreferencePair(prompt, [chosen], [top], index, j, kind, float(log_p[chosen]), float(log_p[top])))
    return pairs


def _pick_chosen(log_p: torch.Tensor, candidates: list[int], top_k: int) -> tuple[int, str]:
    top = int(log_p.argmax())
    wrong = [c for c in dict.fromkeys(candidates) if c != top and c < log_p.numel()]
    if wrong:
        return min(wrong, key=lambda c: (float(log_p[c]), c)), "tool_name"
    ranked = log_p.topk(max(2, top_k)).indices.tolist()
    return int(ranked[-1]), "top_k"


def _first_tokens(tokenizer, names: list[str]) -> list[int]:
    return [ids[0] for ids in (tokenizer(name, add_special_tokens=False)["input_ids"] for name in names) if ids]


@torch.no_grad()
def _next_token_logprobs(model, prompts: list[list[int]], progress: bool, batch: int = 16) -> list[torch.Tensor]:
    """The model's next-token log-probabilities after each prompt, `[vocab]` each; prompts of one length share a
    batched forward (no padding, so each row equals an unbatched forward up to float rounding)."""
    device = next(model.parameters()).device
    out: list[torch.Tensor | None] = [None] * len(prompts)
    by_length: dict[int, list[int]] = {}
    for index, prompt in enumerate(prompts):
        by_length.setdefault(len(prompt), []).append(index)
    with tqdm(total=len(prompts), desc="mining decision points", unit="point", disable=not progress) as bar:
        for indices in by_length.values():
            for start in range(0, len(indices), batch):
                chunk = indices[start:start + batch]
                ids = torch.tensor([prompts[i] for i in chunk], device=device)  # [b, length]
                log_p = torch.log_softmax(model(ids).logits[:, -1].float(), dim=-1)  # [b, vocab]
                for i, row in zip(chunk, log_p):
                    out[i] = row
                bar.update(len(chunk))
    return out
