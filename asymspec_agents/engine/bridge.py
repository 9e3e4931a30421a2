"""A vocabulary bridge: a drafter and a verifier whose tokenizers differ (different model families).

Tokens whose decoded bytes are equal (after each tokenizer's space marker and byte tokens are normalised to raw
bytes) form the *intersection*. Across the bridge:

- the drafter proposes only intersection tokens (its other logits are masked), each mapped to the verifier's id;
- δ and the gate are computed in the drafter's vocabulary; δ is lifted onto the verifier's intersection ids and
  is 0 elsewhere; the draft distribution q is lifted the same way, so acceptance and the residual are the usual
  ones in the verifier's vocabulary (lossless for any q);
- the drafter reads the committed text in its own tokens (`DraftTranscript`): an intersection token maps back
  one-to-one; a verifier token outside the intersection makes the drafter re-encode the committed text from the
  last boundary where both token sequences ended at the same byte (as transformers' universal assisted
  generation re-encodes), and its prefix caches crop to what still matches.
"""

from __future__ import annotations

import torch

from ..errors import VocabularyMismatchError
from ..token_bytes import BYTE_TOKEN, token_bytes

MIN_SHARED_TOKENS = 256  # fewer shared tokens (or under half a small drafter vocabulary): refuse the pair


class VocabularyBridge:
    def __init__(self, verifier_tokenizer, drafter_tokenizer, *, verifier_vocab: int, drafter_vocab: int,
                 verifier_eos: set[int], drafter_eos: set[int]):
        self.verifier_tokenizer, self.drafter_tokenizer = verifier_tokenizer, drafter_tokenizer
        self.verifier_vocab, self.drafter_vocab = verifier_vocab, drafter_vocab
        self.verifier_bytes = token_bytes(verifier_tokenizer, verifier_vocab)
        drafter_bytes = token_bytes(drafter_tokenizer, drafter_vocab)
        verifier_by_bytes = _id_per_bytes(self.verifier_bytes, verifier_tokenizer)
        pairs = {d: verifier_by_bytes[data] for data, d in _id_per_bytes(drafter_bytes, drafter_tokenizer).items()
                 if data in verifier_by_bytes}  # drafter id -> verifier id
        self.shared_text_tokens = len(pairs)
        drafter_eos = {d for d in drafter_eos if d < drafter_vocab}
        if verifier_eos and drafter_eos:  # end of sequence means the same to both, whatever its spelling
            # one drafter id per verifier id, so that lifting q never has two sources for one column
            preferred = drafter_tokenizer.eos_token_id
            target = verifier_tokenizer.eos_token_id
            pairs[preferred if preferred in drafter_eos else min(drafter_eos)] = (
                target if target in verifier_eos else min(verifier_eos))
        drafter_text = sum(1 for data in drafter_bytes if data)
        needed = min(MIN_SHARED_TOKENS, (drafter_text + 1) // 2)
        if self.shared_text_tokens < needed:
            raise VocabularyMismatchError(
                f"The drafter's and verifier's vocabularies share only {self.shared_text_tokens} of the drafter's "
                f"{drafter_text} text tokens with equal bytes (need at least {needed}); the drafter could propose "
                "almost nothing. Pick a drafter "
                "whose tokenizer covers the same text (same family, or a byte-level BPE over the same language)."
            )
        drafter_ids = sorted(pairs)
        self.drafter_ids = torch.tensor(drafter_ids, dtype=torch.long)  # [n]
        self.verifier_ids = torch.tensor([pairs[d] for d in drafter_ids], dtype=torch.long)  # [n]
        self.to_verifier = [-1] * drafter_vocab
        self.to_drafter = [-1] * verifier_vocab
        for d, v in zip(drafter_ids, self.verifier_ids.tolist()):
            self.to_verifier[d] = v
            if self.to_drafter[v] < 0:
                self.to_drafter[v] = d
        self.drafter_mask = torch.zeros(drafter_vocab, dtype=torch.bool)
        self.drafter_mask[self.drafter_ids] = True

    def describe(self) -> str:
        return (f"drafter and verifier vocabularies differ ({self.drafter_vocab} vs {self.verifier_vocab} tokens); "
                f"bridging over {self.shared_text_tokens} tokens with equal bytes "
                f"({self.shared_text_tokens / self.drafter_vocab:.0%} of the drafter's, "
                f"{self.shared_text_tokens / self.verifier_vocab:.0%} of the verifier's)")

    # -- logits and masks ------------------------------------------------------------------------------------

    def lift(self, rows: torch.Tensor) -> torch.Tensor:
        """Drafter-vocabulary rows onto the verifier's vocabulary: intersection ids carry them, the rest 0.
        `[n, drafter_vocab]` -> `[n, verifier_vocab]` (used for δ and the draft distribution q)."""
        out = rows.new_zeros(rows.shape[:-1] + (self.verifier_vocab,))
        index = self.verifier_ids.to(rows.device)
        out[..., index] = rows[..., self.drafter_ids.to(rows.device)]
        return out

    def drafter_allowed(self, verifier_allowed: torch.Tensor | None) -> torch.Tensor:
        """What the drafter may propose: intersection tokens that the verifier-side grammar (if any) allows."""
        if verifier_allowed is None:
            return self.drafter_mask
        allowed = torch.zeros_like(self.drafter_mask)
        allowed[self.drafter_ids] = verifier_allowed[self.verifier_ids]
        return allowed

    # -- text ------------------------------------------------------------------------------------------------

    def drafter_prompt(self, verifier_ids: list[int]) -> list[int]:
        """The same prompt text in the drafter's tokens (the verifier's BOS/padding dropped, the drafter's own added)."""
        tokenizer = self.verifier_tokenizer
        drop = {tokenizer.bos_token_id, tokenizer.pad_token_id} - {None}
        text = tokenizer.decode([i for i in verifier_ids if i not in drop], skip_special_tokens=False)
        return self.drafter_tokenizer(text, add_special_tokens=True)["input_ids"]

    def encode_bytes(self, data: bytes) -> list[int]:
        return self.drafter_tokenizer(data.decode("utf-8", errors="replace"), add_special_tokens=False)["input_ids"]


class _SameIds:
    def __getitem__(self, token: int) -> int:
        return token


class SameVocabulary:
    """The trivial bridge of a drafter that shares the verifier's vocabulary: every id is its own, rows and masks
    pass as they are, and the drafter's transcript spells the committed tokens themselves."""

    to_verifier = to_drafter = _SameIds()

    def lift(self, rows: torch.Tensor) -> torch.Tensor:
        return rows

    def drafter_allowed(self, verifier_allowed: torch.Tensor | None) -> torch.Tensor | None:
        return verifier_allowed


class DraftTranscript:
    """The committed tokens in the drafter's vocabulary, spelling the same bytes as the verifier's committed tokens
    (up to a trailing partial UTF-8 character, re-encoded once it completes)."""

    def __init__(self, bridge: VocabularyBridge | SameVocabulary):
        self.bridge = bridge
        self.tokens: list[int] = []
        self.resyncs = 0  # verifier tokens outside the intersection that made the drafter re-encode
        self._pending: list[int] = []  # verifier tokens since the last common boundary
        self._boundary = 0  # len(self.tokens) at that boundary

    def extend(self, verifier_tokens: list[int]) -> None:
        for v in verifier_tokens:
            d = self.bridge.to_drafter[v]
            if d >= 0 and not self._pending:
                self.tokens.append(d)
                continue
            if not self._pending:
                self._boundary = len(self.tokens)
            self._pending.append(v)
            self.resyncs += 1
            data = b"".join(self.bridge.verifier_bytes[t] for t in self._pending)
            self.tokens[self._boundary:] = self.bridge.encode_bytes(data)
            if _complete_utf8(data):
                self._pending = []


def _id_per_bytes(table: list[bytes], tokenizer) -> dict[bytes, int]:
    """bytes -> one id: the lowest ordinary piece, else the `<0xNN>` byte-fallback token."""
    chosen: dict[bytes, int] = {}
    fallback = {i for t, i in tokenizer.get_vocab().items() if BYTE_TOKEN.match(t)}
    for index, data in enumerate(table):
        if data and index not in fallback:
            chosen.setdefault(data, index)
    for index in sorted(fallback):
        if index < len(table) and table[index]:
            chosen.setdefault(table[index], index)
    return chosen


def _complete_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
