"""The pair check: drafter and verifier must share one token <-> id mapping (or be bridged, engine/bridge.py)."""

from __future__ import annotations

from ..errors import VocabularyMismatchError


def check_shared_vocabulary(verifier_tokenizer, drafter_tokenizer, verifier_model=None, drafter_model=None) -> int:
    """Return the shared vocabulary size, or raise `VocabularyMismatchError` naming the first differing ids.

    Embedding matrices may have more rows than the tokenizer has tokens (padding, as Qwen checkpoints do);
    those rows can never be decoded, so only tokenizer ids count, and each model must have a logit for each.
    """
    if verifier_tokenizer is not drafter_tokenizer:
        v_tokens = _id_to_token(verifier_tokenizer)
        d_tokens = _id_to_token(drafter_tokenizer)
        if v_tokens != d_tokens:
            differing = [i for i in range(max(len(v_tokens), len(d_tokens))) if _at(v_tokens, i) != _at(d_tokens, i)]
            shown = ", ".join(f"id {i}: verifier {_at(v_tokens, i)!r} vs drafter {_at(d_tokens, i)!r}" for i in differing[:3])
            raise VocabularyMismatchError(
                f"Drafter and verifier vocabularies differ ({len(d_tokens)} vs {len(v_tokens)} tokens, "
                f"{len(differing)} ids differ; first: {shown}). Pick a drafter from the verifier's model family "
                "(same tokenizer), or use a vocabulary bridge for different families."
            )
    size = len(verifier_tokenizer)
    for role, model in (("verifier", verifier_model), ("drafter", drafter_model)):
        if model is not None:
            rows = model.get_output_embeddings().weight.shape[0]
            if rows < size:
                raise VocabularyMismatchError(
                    f"The {role} has {rows} output logits but its tokenizer has {size} tokens; the checkpoint and "
                    "tokenizer do not belong together."
                )
    return size


def _id_to_token(tokenizer) -> list[str]:
    table = [""] * len(tokenizer)
    for token, index in tokenizer.get_vocab().items():
        if index < len(table):
            table[index] = token
    return table


def _at(table: list[str], index: int) -> str | None:
    return table[index] if index < len(table) else None
