"""The raw bytes behind token ids, for any fast tokenizer (byte-level BPE or SentencePiece style).

A bottom-level module: the vocabulary bridge, decision points and the test tokenizers all read it.
"""

from __future__ import annotations

import json
import re

from .errors import VocabularyMismatchError

BYTE_TOKEN = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")  # SentencePiece byte-fallback pieces


def token_bytes(tokenizer, vocab_size: int) -> list[bytes]:
    """The raw bytes each token id stands for (special tokens: empty). Byte-level BPE (GPT-2, SmolLM2, Qwen)
    maps its printable alphabet back to bytes; SentencePiece-style vocabularies (Llama, Gemma) turn '▁' into a
    space and `<0xNN>` into that byte."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise VocabularyMismatchError(
            f"{type(tokenizer).__name__} is a slow tokenizer; bridging vocabularies needs a fast (Rust) tokenizer: "
            "load it with use_fast=True."
        )
    decoder = json.dumps(json.loads(backend.to_str()).get("decoder"))
    byte_level = '"ByteLevel"' in decoder
    table = [b""] * vocab_size
    specials = _special_ids(tokenizer)
    inverse = byte_level_inverse() if byte_level else None
    for token, index in tokenizer.get_vocab().items():
        if index >= vocab_size or index in specials:
            continue
        if byte_level:
            if all(ch in inverse for ch in token):
                table[index] = bytes(inverse[ch] for ch in token)
            else:  # an added, non-special token: stored as plain text
                table[index] = token.encode()
            continue
        match = BYTE_TOKEN.match(token)
        table[index] = bytes([int(match.group(1), 16)]) if match else token.replace("\u2581", " ").encode()
    return table


def _special_ids(tokenizer) -> set[int]:
    ids = set(tokenizer.all_special_ids)
    for index, added in getattr(tokenizer, "added_tokens_decoder", {}).items():
        if added.special:
            ids.add(int(index))
    return ids


def byte_level_inverse() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: printable stand-in character -> byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}
