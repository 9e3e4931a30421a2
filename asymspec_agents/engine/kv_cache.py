"""KV caches at a chosen storage precision: float32 (layers that grow in place), bfloat16, or int8.

A float32 layer (`GrowingLayer`) keeps its keys and values in buffers with room to spare and writes a forward's
new tokens in place; transformers' DynamicLayer concatenates, copying the whole cache on every forward (at 7k
tokens that is a sixth of a one-token forward of SmolLM2-135M: 108 -> 90 ms measured).

Low-precision layers store what they are given in bfloat16, or int8 with one absmax scale per token and head,
and hand the attention back float32 (dequantized) keys and values. Tokens of the current forward are stored
before they are read, as in serving stacks whose attention reads the paged cache: later slots of a block
attend to quantized entries of earlier ones. Used by the precision probe and by engines built with
`kv_cache="int8"`.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

PRECISIONS = ("float32", "bfloat16", "int8")


def make_cache(config, precision: str = "float32") -> DynamicCache:
    if precision not in PRECISIONS:
        raise ValueError(f"Unknown KV cache precision {precision!r}; choose one of {', '.join(PRECISIONS)}.")
    cache = DynamicCache(config=config)
    # Every layer keeps all its tokens, sliding-window layers too (Gemma 3): a sliding layer that drops old
    # tokens cannot be cropped back past its window, and our prefix caches roll back to any common prefix.
    # The model still applies the window through its attention mask (logits match a fresh forward to ~5e-5).
    if precision == "float32":
        cache.layers = [GrowingLayer() for _ in cache.layers]
    else:
        cache.layers = [LowPrecisionLayer(precision) for _ in cache.layers]
    return cache


class GrowingLayer(DynamicLayer):
    """A float layer whose `keys` and `values` are views of the filled part of larger buffers."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.key_buffer = self.value_buffer = None
        self.length = 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if self.key_buffer is None or end > self.key_buffer.shape[-2]:
            room = self.room(end)
            self.key_buffer, self.value_buffer = (_grown(old, new, self.length, room) for old, new in
                                                  ((self.key_buffer, key_states), (self.value_buffer, value_states)))
        self.key_buffer[..., self.length:end, :] = key_states
        self.value_buffer[..., self.length:end, :] = value_states
        self._filled(end)
        return self.keys, self.values

    @staticmethod
    def room(tokens: int) -> int:
        """Tokens a buffer that must hold `tokens` gets: an eighth more (at least 64), so that a reply's tokens are
        written in place and growing copies the cache once per eighth of its length."""
        return tokens + max(64, tokens // 8)

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative count of tokens to remove, got {tokens_to_remove}")
        if tokens_to_remove and self.is_initialized:
            self._filled(max(0, self.length + tokens_to_remove))

    def reset(self) -> None:
        super().reset()
        self.key_buffer = self.value_buffer = None
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes the buffers hold, room to spare included."""
        buffers = (self.key_buffer, self.value_buffer) if self.is_initialized else ()
        return sum(b.numel() * b.element_size() for b in buffers if b is not None)

    def _filled(self, length: int) -> None:
        self.length = length
        self.keys, self.values = self.key_buffer[..., :length, :], self.value_buffer[..., :length, :]


def _grown(old: torch.Tensor | None, like: torch.Tensor, filled: int, room: int) -> torch.Tensor:
    """A buffer of `room` tokens holding `old`'s first `filled`."""
    buffer = like.new_empty(*like.shape[:-2], room, like.shape[-1])
    if filled:
        buffer[..., :filled, :] = old[..., :filled, :]
    return buffer


def cache_bytes(config, precision: str, tokens: int) -> int:
    """Bytes a cache of `precision` for a model of `config` holds at `tokens` tokens, a growing layer's room
    included: what the cache pool reserves for a call before it runs."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    # per layer, head and token: keys and values, plus an int8 cache's float32 scale for each
    per_token = 2 * config.num_hidden_layers * heads * {"float32": 4 * head_dim, "bfloat16": 2 * head_dim,
                                                          "int8": head_dim + 4}[precision]
    return per_token * (GrowingLayer.room(tokens) if precision == "float32" and tokens else tokens)


def layer_bytes(layer) -> int:
    """Bytes of keys, values (and int8 scales) a cache layer holds."""
    if isinstance(layer, GrowingLayer):
        return layer.nbytes
    tensors = (getattr(layer, name, None) for name in ("keys", "values", "key_scales", "value_scales"))
    return sum(t.numel() * t.element_size() for t in tensors if hasattr(t, "element_size"))


class LowPrecisionLayer(DynamicLayer):
    def __init__(self, precision: str):
        super().__init__()
        self.precision = precision
        self.key_scales = self.value_scales = None  # int8 only: [batch, heads, seq, 1]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self.dtype = key_states.dtype
        keys, key_scales = quantize(key_states, self.precision)
        values, value_scales = quantize(value_states, self.precision)
        self.keys = torch.cat([self.keys, keys], dim=-2) if self.keys.numel() else keys
        self.values = torch.cat([self.values, values], dim=-2) if self.values.numel() else values
        if key_scales is not None:
            self.key_scales = key_scales if self.key_scales is None else torch.cat([self.key_scales, key_scales], dim=-2)
            self.value_scales = value_scales if self.value_scales is None else torch.cat([self.value_scales, value_scales], dim=-2)
        return dequantize(self.keys, self.key_scales, self.dtype), dequantize(self.values, self.value_scales, self.dtype)

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)
        if tokens_to_remove and self.key_scales is not None:
            self.key_scales = self.key_scales[..., :tokens_to_remove, :]
            self.value_scales = self.value_scales[..., :tokens_to_remove, :]

    def reset(self) -> None:
        super().reset()
        self.key_scales = self.value_scales = None


def quantize(x: torch.Tensor, precision: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token symmetric int8 (absmax over the head dimension), or a plain bfloat16 cast."""
    if precision == "bfloat16":
        return x.to(torch.bfloat16), None
    scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-8) / 127.0
    return torch.round(x / scale).clamp(-127, 127).to(torch.int8), scale


def dequantize(x: torch.Tensor, scale: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    return x.to(dtype) if scale is None else x.to(dtype) * scale.to(dtype)
