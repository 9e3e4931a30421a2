"""The drafter's copy head: its rows mixed with what its own view continues where the reply repeats it.

Prompt lookup (as transformers' `prompt_lookup_num_tokens` and vLLM's n-gram proposer draft): where the last n
tokens of the reply so far (n from `LONGEST` down to `SHORTEST`) also occur in the stream's prompt, the tokens that
followed them there are likely next. Only the reply's own tokens are matched: the chat template's tail before it
would otherwise match earlier turns and copy, say, a tool's output as the reply.

A small drafter reads a long document poorly, but it need not read a needle to copy it once the reply has begun to
echo the sentence around it ("… the lighthouse on Skerry Island is called" → " Margit"). The copy distribution c
(the continuations of the longest matching n-gram, by count) is mixed into the drafter's probabilities,
p' = (1 − λ)·p + λ·c, in each of its two views from that view's own prompt: δ then carries a copy where the full
view holds the text and the compressed view lost it, and next to nothing where both hold it. λ is
`GenerationConfig.copy_weight` (0: off, the drafter's rows as they are).
"""

from __future__ import annotations

from collections import Counter, defaultdict

import torch

SHORTEST, LONGEST = 3, 8  # n-gram lengths matched: shorter ones match common phrases all over a document


class PromptIndex:
    """For every n-gram of a prompt (n in [SHORTEST, LONGEST]), the tokens that followed it, with their counts."""

    def __init__(self, prompt: list[int]):
        self.following: dict[tuple[int, ...], Counter] = defaultdict(Counter)
        for n in range(SHORTEST, LONGEST + 1):
            for end in range(n, len(prompt)):
                self.following[tuple(prompt[end - n:end])][prompt[end]] += 1

    def continuations(self, sequence: list[int], end: int, start: int = 0) -> Counter | None:
        """What followed, in the prompt, the longest n-gram of `sequence[start:end]` ending at `end`; None without
        a match."""
        for n in range(min(LONGEST, end - start), SHORTEST - 1, -1):
            found = self.following.get(tuple(sequence[end - n:end]))
            if found:
                return found
        return None


def mix(row: torch.Tensor, found: Counter | None, weight: float) -> torch.Tensor:
    """log((1 − weight)·softmax(row) + weight·c): log-probabilities, which every reader takes as logits."""
    if not found:
        return row
    out = torch.log_softmax(row.float(), dim=-1) + torch.log1p(torch.tensor(-weight))
    total = sum(found.values())
    ids = torch.tensor(list(found), device=row.device)
    copy = torch.tensor([weight * count / total for count in found.values()], device=row.device).log()
    out[ids] = torch.logaddexp(out[ids], copy)
    return out


class CopyingStream:
    """A drafter stream whose rows carry the copy head; everything else is the stream's own."""

    def __init__(self, stream, prompt: list[int], weight: float):
        self._stream, self._index, self._weight = stream, PromptIndex(prompt), weight
        self._reply_start = len(prompt)

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def __len__(self) -> int:
        return len(self._stream)

    def forward(self, tokens: list[int], keep: int | None = None, *, ahead: int = 0) -> torch.Tensor:
        rows = self._stream.forward(tokens, keep, ahead=ahead)
        sequence = self._stream.ids
        first = len(sequence) - rows.shape[0] + 1  # the sequence's length at the first returned row
        start = self._reply_start
        return torch.stack([mix(row, self._index.continuations(sequence, first + i, start), self._weight)
                            for i, row in enumerate(rows)])
