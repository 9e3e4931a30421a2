"""Test fixtures: byte-level tokenizers and tiny random Llama models, deterministic by seed.

Used by the test suites and by benchmarks that need a pair that loads in milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .token_bytes import byte_level_inverse


BYTE_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def byte_tokenizer(merges: list[str] = (), alphabet: str | None = None):
    """A byte-level tokenizer: 3 specials + 256 bytes (259 tokens), every string encodes, decoding is exact.

    `merges`: extra BPE tokens spelled as text (e.g. `["th", " the"]`, each built from two existing tokens,
    longest last), so two tokenizers can share some tokens and not others (vocabulary-bridge tests).
    `alphabet`: keep only these characters' bytes (a tiny vocabulary for statistical tests)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    to_char = {b: c for c, b in byte_level_inverse().items()}
    spell = lambda text: "".join(to_char[b] for b in text.encode())  # noqa: E731 - text -> byte-level symbols
    chars = sorted(pre_tokenizers.ByteLevel.alphabet()) if alphabet is None else sorted({spell(c) for c in alphabet})
    merge_pairs = []
    for token in merges:
        known = set(chars) | {spell(m) for m in merges[: merges.index(token)]}
        word = spell(token)
        split = next((i for i in range(len(word) - 1, 0, -1) if word[:i] in known and word[i:] in known), None)
        if split is None:
            raise ValueError(f"merge {token!r} is not two known tokens; list its parts first")
        merge_pairs.append((word[:split], word[split:]))
    vocab = {token: index for index, token in enumerate(specials + chars + [spell(m) for m in merges])}
    core = Tokenizer(models.BPE(vocab=vocab, merges=merge_pairs))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = BYTE_CHAT_TEMPLATE
    return tokenizer


def tiny_random_model(vocab_size: int, *, seed: int = 0, layers: int = 2, hidden: int = 64, logit_std: float = 3.0,
                      max_positions: int = 4096, dtype: torch.dtype = torch.float32):
    """A small Llama with random weights, deterministic by seed; `logit_std` makes its distributions peaky enough
    that greedy decoding is not decided by float noise."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
        torch.nn.init.normal_(model.lm_head.weight, std=logit_std / hidden**0.5)
    return model.to(dtype).eval()


@dataclass
class TinyPair:
    verifier: object
    drafter: object
    tokenizer: object


def tiny_random_pair(seed: int = 0, *, tokenizer=None, same: bool = False, drafter_layers: int = 1, **model_kwargs) -> TinyPair:
    """A verifier and a drafter over one tokenizer (the byte tokenizer unless given).

    `same=True` makes the drafter the verifier itself (the "same assistant" of losslessness tests).
    """
    tokenizer = tokenizer or byte_tokenizer()
    verifier = tiny_random_model(len(tokenizer), seed=seed, **model_kwargs)
    drafter = verifier if same else tiny_random_model(len(tokenizer), seed=seed + 1000, layers=drafter_layers, **model_kwargs)
    return TinyPair(verifier, drafter, tokenizer)


def generate_at_once(engine, prompts: list[tuple[list[int], list[int]]], config, timeout: float = 300.0) -> list:
    """`engine.generate(full, comp, config).token_ids` for every (full, comp) prompt, each in a thread of its own,
    all started together (None where a thread did not finish within `timeout` seconds)."""
    import threading

    out: dict[int, list[int]] = {}
    threads = [threading.Thread(target=lambda i=i, p=p: out.__setitem__(i, engine.generate(*p, config).token_ids))
               for i, p in enumerate(prompts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout)
    return [out.get(i) for i in range(len(prompts))]


def png_bytes(width: int = 8, height: int = 8, color: str = "red") -> bytes:
    """A small real PNG image (Pillow), for tests of the image paths."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buffer, "PNG")
    return buffer.getvalue()


def wait_for(condition, seconds: float = 60.0, every: float = 0.05) -> bool:
    """Whether `condition()` came true within `seconds`, asked every `every` seconds (tests of concurrent work)."""
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every)
    return False
