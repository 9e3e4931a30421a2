"""A KV stream: one model reading one view, with a prefix cache that survives across calls.

`ids` always equals what the cache holds. A new call crops to the longest common prefix with its prompt and
prefills only the rest; rollback after a verification block crops by length (never copies).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import torch

from .batching import FORWARDS, Request
from .kv_cache import GrowingLayer, cache_bytes, layer_bytes, make_cache
from .stats import StreamStats

PREFILL_CHUNK = 4096  # bounds attention memory on long prompts; one-shot prefill of 3k tokens is ~12% faster than 1k chunks


class Stream(Protocol):
    """What the decoding loop needs of a stream: `KVStream` (a local model) and `remote_stream.RemoteStream` (a
    model on a vLLM server) implement it."""

    role: str
    view: str
    vocab_size: int
    ids: list[int]  # what the stream has read
    stats: StreamStats
    concurrent: bool  # its forwards wait on a server, so they may overlap another stream's

    @property
    def name(self) -> str: ...

    @property
    def device(self) -> torch.device: ...

    def start_call(self) -> None: ...

    def sync(self, prompt: list[int], donors: list["Stream"] = ()) -> None:
        """Hold `prompt[:-1]`; its last token is fed with the first block."""

    @property
    def nbytes(self) -> int:
        """Bytes this stream holds in this process (what the cache pool's budget counts)."""

    def bytes_for(self, tokens: int) -> int:
        """Bytes it would hold at `tokens` tokens (what the pool reserves for a call before it runs)."""

    def forward(self, tokens: list[int], keep: int | None = None, *, ahead: int = 0) -> torch.Tensor:
        """Feed tokens; `[keep, vocab]` logits (or log-probabilities) after the last `keep` of them. `ahead`: how
        many single-token forwards will likely follow (a remote stream computes them in the same request)."""

    def rollback(self, length: int) -> None: ...

    def copy_prefix(self, donor: "Stream", length: int) -> None: ...


class KVStream:
    concurrent = False  # its forwards use this machine's cores, on the forward thread (batching.py)

    def __init__(self, model, role: str, view: str, vocab_size: int, kv_cache: str = "float32"):
        self.model = model
        self.kv_cache = kv_cache
        self.role, self.view = role, view
        self.vocab_size = vocab_size
        self.ids: list[int] = []
        self.cache = None
        self.stats = StreamStats(role, view)
        self._flops_per_token, self._attention_flops, self._head_flops = _flop_constants(model)
        self._device = next(model.parameters()).device
        self._config = text_config(model)

    @property
    def name(self) -> str:
        """docs/design.md §2's names: S_full, S_comp (drafter), V_comp, V_full (verifier)."""
        return f"{'S' if self.role == 'drafter' else 'V'}_{self.view}"

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def device(self) -> torch.device:
        return self._device

    def start_call(self) -> None:
        """Fresh stats for a new call (the prefix cache stays)."""
        self.stats = StreamStats(self.role, self.view)

    def sync(self, prompt: list[int], donors: list["KVStream"] = ()) -> None:
        """Make the cache hold `prompt[:-1]`; its last token is fed with the first block.

        `donors`: streams of the same model already holding part of this prompt (an identical drafter and verifier
        read the same view); their keys and values are copied instead of computed again."""
        target = prompt[:-1]
        keep = common_prefix(self.ids, target)
        self.rollback(keep)
        for donor in (d for d in donors if d.model is self.model):
            reach = common_prefix(donor.ids, target)
            if reach > keep and self._copy_from(donor, keep, reach):
                keep = reach
        self.stats.reused_tokens += keep
        self.stats.reused_flops += self._flops(keep, 0, 0)
        rest = prompt[keep:-1]
        for start in range(0, len(rest), PREFILL_CHUNK):
            self._forward(rest[start:start + PREFILL_CHUNK], keep_logits=1, prefill=True)

    @property
    def nbytes(self) -> int:
        """Bytes of keys, values (and int8 scales) the cache holds, room to spare included."""
        return 0 if self.cache is None else sum(layer_bytes(layer) for layer in self.cache.layers)

    def bytes_for(self, tokens: int) -> int:
        return cache_bytes(self._config, self.kv_cache, tokens)

    def forward(self, tokens: list[int], keep: int | None = None, *, ahead: int = 0) -> torch.Tensor:
        """Feed tokens, return float32 logits over the shared vocabulary for the last `keep` of them (all by
        default). `[keep, vocab]`. Keep only what is read: the output projection is a large share of a small
        model's forward, and on CPU it costs twice as much for two rows as for one. `ahead` has no use here."""
        keep = len(tokens) if keep is None else min(keep, len(tokens))
        return self._forward(tokens, keep_logits=keep, prefill=False)

    def copy_prefix(self, donor: "KVStream", length: int) -> None:
        """Start an empty stream from the donor's first `length` cached tokens (same model; plain float caches
        only, otherwise the stream stays empty and prefills)."""
        if self.ids or donor.model is not self.model:
            raise RuntimeError(f"copy_prefix needs an empty {self.name} stream of the donor's model")
        if length > 0:
            self._copy_from(donor, 0, length)

    def rollback(self, length: int) -> None:
        drop = len(self.ids) - length
        if drop < 0:
            raise RuntimeError(f"{self.role}/{self.view} stream holds {len(self.ids)} tokens, cannot roll back to {length}")
        if drop:
            self.cache.crop(-drop)  # transformers 5.x: a negative count of tokens to drop
            del self.ids[length:]

    def reset(self) -> None:
        self.ids, self.cache = [], None

    def _copy_from(self, donor: "KVStream", start: int, end: int) -> bool:
        """Append the donor's keys and values of positions [start, end) (float32 caches only)."""
        if self.cache is None:
            self.cache = make_cache(self.model.config, self.kv_cache)
        pairs = list(zip(self.cache.layers, donor.cache.layers)) if donor.cache is not None else []
        if not pairs or not all(isinstance(a, GrowingLayer) and isinstance(b, GrowingLayer) for a, b in pairs):
            return False
        with torch.inference_mode():  # the buffers are inference tensors (the forward thread made them)
            for mine, theirs in pairs:
                mine.update(theirs.keys[:, :, start:end], theirs.values[:, :, start:end])
        self.ids.extend(donor.ids[start:end])
        return True

    def _forward(self, tokens: list[int], keep_logits: int, prefill: bool) -> torch.Tensor:
        if self.cache is None:
            self.cache = make_cache(self.model.config, self.kv_cache)
        start = time.perf_counter()
        context = len(self.ids)
        try:
            with torch.inference_mode():
                logits = FORWARDS.run(Request(self.model, self.cache, context, tokens, keep_logits))
        except BaseException:
            self.reset()  # the cache may hold part of this forward: start over rather than trust it
            raise
        self.ids.extend(tokens)
        logits = logits[:, : self.vocab_size].float()
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        self._count(len(tokens), context, keep_logits, prefill, time.perf_counter() - start)
        return logits

    def _count(self, n: int, context: int, kept: int, prefill: bool, seconds: float) -> None:
        s = self.stats
        if prefill:
            s.prefill_tokens += n
            s.prefill_forwards += 1
            s.prefill_seconds += seconds
        else:
            s.decode_tokens += n
            s.decode_forwards += 1
            s.decode_sizes[n] += 1
            if kept < n:
                s.decode_partial_logits[n] += 1
        s.flops += self._flops(n, context, kept)
        s.seconds += seconds

    def _flops(self, n: int, context: int, kept_logits: int) -> float:
        attended = n * context + n * (n + 1) // 2  # each new token attends to the cache and the new tokens before it
        return self._flops_per_token * n + self._attention_flops * attended + self._head_flops * kept_logits


def _flop_constants(model) -> tuple[float, float, float]:
    """Per token: 2 × non-embedding body parameters; per attended position: QKᵀ and AV; per kept logit row: lm_head."""
    config = text_config(model)
    embedding = model.get_input_embeddings().weight.numel()
    head = model.get_output_embeddings().weight.numel()
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    body = weight_count(model) - embedding - (0 if tied else head)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    attention = 4.0 * config.num_hidden_layers * config.num_attention_heads * head_dim
    return 2.0 * body, attention, 2.0 * head


def text_config(model):
    """The config of the model's language part (a multimodal model's text config)."""
    return model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config


def weight_count(model) -> int:
    """Parameters, counting the packed weights of int8 (dynamically quantized) linear maps, which are none."""
    total = sum(p.numel() for p in model.parameters())
    for module in filter(is_int8_linear, model.modules()):
        weight, bias = module.weight(), module.bias()
        total += weight.numel() + (bias.numel() if bias is not None else 0)
    return total


def is_int8_linear(module) -> bool:
    """A linear map torch's dynamic quantization packed (its weight is a method returning the int8 tensor)."""
    return type(module).__module__.startswith("torch.ao.nn.quantized") and callable(getattr(module, "weight", None))


_overlap = ThreadPoolExecutor(max_workers=8, thread_name_prefix="asymspec-remote")


def forward_together(calls: list[tuple[Stream, list[int], int]]) -> list[torch.Tensor]:
    """`stream.forward(tokens, keep)` for each call; the calls of streams that wait on a server run at the same
    time (a block's verifier and contrast requests overlap), the others here, in order. Every call finishes before
    the first error is raised, so no stream is left half-way."""
    futures = {i: _overlap.submit(stream.forward, tokens, keep) for i, (stream, tokens, keep) in enumerate(calls)
               if stream.concurrent and sum(s.concurrent for s, _, _ in calls) > 1}
    results, problem = [], None
    for i, (stream, tokens, keep) in enumerate(calls):
        try:
            results.append(futures[i].result() if i in futures else stream.forward(tokens, keep))
        except BaseException as exc:  # noqa: BLE001 - re-raised once every call has ended
            problem = problem or exc
    if problem is not None:
        raise problem
    return results


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
