"""Every local forward of the process, on one thread: forwards asked for while another runs wait, and then run
together, one ragged forward per model (docs/design.md §2).

One thread: torch's OpenMP keeps a pool of workers per thread that ran a parallel kernel, and two such pools on
a small machine slow every forward by half again (threads.py). The calls decoding beside it hand their forwards
over and do their own, small, work on one core (`threads.single_core`).

A ragged forward lays the new tokens of several streams side by side in one sequence, as vLLM flattens a batch:
every linear map and the output head read their weights once for all of them, and attention runs per stream, on
its own cache, with its own causal mask. A decoding forward over a few tokens is bound by reading the weights
(on a CPU, and on a GPU too), so four conversations' forwards together cost about twice one. Where nothing waits,
a forward runs alone, exactly as before; a model whose attention this module does not know (sliding windows,
other families) runs its waiting forwards one after another.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import threading
from collections import Counter
from dataclasses import dataclass

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

from ..threads import release_pool

RAGGED = "asymspec_ragged"
FAMILIES = ("llama", "qwen2", "qwen3")  # decoders whose attention reads `cache.update` and the attention interface
_batch: contextvars.ContextVar["RaggedCache | None"] = contextvars.ContextVar("asymspec_ragged_batch", default=None)


@dataclass(eq=False)
class Request:
    """One stream's forward: its cache takes `tokens`; the logits of the last `keep` come back."""

    model: object
    cache: object
    past: int  # tokens the cache holds before this forward
    tokens: list[int]
    keep: int
    logits: torch.Tensor | None = None
    error: BaseException | None = None
    done: bool = False


class Forwards:
    """The forward thread: runs waiting forwards, those of one model at a time as one ragged forward."""

    GATHER_SECONDS = 0.010  # how long a batch waits for the forwards of other calls still on their way

    def __init__(self):
        self._turn = threading.Condition()
        self._waiting: list[Request] = []
        self._calls = 0  # calls decoding now: each will ask for a forward soon
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def call(self):
        """Around a call's decoding (a block): a batch waits a moment for the forwards of the calls that are in one."""
        with self._turn:
            self._calls += 1
        try:
            yield
        finally:
            with self._turn:
                self._calls -= 1
                self._turn.notify_all()

    def run(self, request: Request) -> torch.Tensor:
        """`request`'s logits, once the forward thread has run it."""
        with self._turn:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="asymspec-forwards", daemon=True)
                self._thread.start()
            self._waiting.append(request)
            self._turn.notify_all()
            self._turn.wait_for(lambda: request.done)
        if request.error is not None:
            raise request.error
        return request.logits

    def _serve(self) -> None:
        with torch.inference_mode():
            while True:
                with self._turn:
                    self._turn.wait_for(lambda: self._waiting)
                    # other calls are between two forwards: wait for theirs, briefly, to run them together
                    self._turn.wait_for(lambda: len(self._waiting) >= self._calls, timeout=self.GATHER_SECONDS)
                    models = Counter(id(r.model) for r in self._waiting)
                    chosen = max(models, key=models.get)  # ties: the model of the longest waiting forward
                    batch = [r for r in self._waiting if id(r.model) == chosen]
                    self._waiting = [r for r in self._waiting if id(r.model) != chosen]
                _run(batch)
                with self._turn:
                    self._turn.notify_all()
                    idle = not self._waiting
                if idle:  # another thread's torch work meanwhile keeps its speed (threads.py)
                    release_pool()


FORWARDS = Forwards()  # the process's one forward thread, shared by every engine


def _run(batch: list[Request]) -> None:
    """Each request's logits or error. A ragged forward that fails leaves no trace: every cache goes back to its
    length before, and the forwards run again one by one, so that only a faulty one fails."""
    try:
        if len(batch) > 1 and batchable(batch[0].model):
            try:
                for request, logits in zip(batch, ragged_forward(batch)):
                    request.logits = logits
                return
            except Exception:  # noqa: BLE001 - run alone below, each raising its own error
                for request in batch:
                    _crop(request.cache, request.past)
        for request in batch:
            try:
                request.logits = single_forward(request)
            except BaseException as exc:  # noqa: BLE001 - raised in the request's own thread
                request.error = exc
    except BaseException as exc:  # noqa: BLE001 - the forward thread lives on; each call raises it
        for request in batch:
            request.error = request.error or exc
    finally:
        for request in batch:
            request.done = True


def _crop(cache, length: int) -> None:
    """Every layer of `cache` back to `length` tokens (a failed forward may have reached some layers only)."""
    for layer in cache.layers:
        extra = layer.get_seq_length() - length if getattr(layer, "is_initialized", True) else 0
        if extra > 0:
            layer.crop(-extra)


def batchable(model) -> bool:
    config = model.config
    return (config.model_type in FAMILIES and not getattr(config, "sliding_window", None)
            and config._attn_implementation in ("sdpa", "eager"))


def single_forward(request: Request) -> torch.Tensor:
    """[keep, vocab] logits of one stream's forward."""
    model = request.model
    out = model(input_ids=torch.tensor([request.tokens], device=model.device), use_cache=True,
                logits_to_keep=request.keep, **{_cache_kwarg(model): request.cache})
    return out.logits[0]


def ragged_forward(batch: list[Request]) -> list[torch.Tensor]:
    """The forwards of several streams of one model as one: [keep, vocab] logits for each."""
    model = batch[0].model
    device = model.device
    ids = torch.tensor([[t for r in batch for t in r.tokens]], device=device)
    positions = torch.cat([torch.arange(r.past, r.past + len(r.tokens), device=device) for r in batch])[None]
    ends = torch.tensor([len(r.tokens) for r in batch], device=device).cumsum(0)
    kept = torch.cat([torch.arange(end - r.keep, end, device=device) for r, end in zip(batch, ends.tolist())])
    cache = RaggedCache([r.cache for r in batch], [len(r.tokens) for r in batch])
    configs = _attention_configs(model)
    before = [c._attn_implementation for c in configs]
    token = _batch.set(cache)
    try:
        for config in configs:
            config._attn_implementation = RAGGED
        # a 4-D mask is taken as it is: no mask is built for the joined sequence (each stream's is, per stream)
        out = model(input_ids=ids, position_ids=positions, attention_mask=torch.ones(1, 1, 0, 0, dtype=torch.bool),
                    use_cache=True, logits_to_keep=kept, **{_cache_kwarg(model): cache})
    finally:
        _batch.reset(token)
        for config, implementation in zip(configs, before):
            config._attn_implementation = implementation
    return list(out.logits[0].split([r.keep for r in batch]))


class RaggedCache:
    """The caches of a ragged forward's streams, as one: each layer's new keys and values are split by stream and
    appended to that stream's own cache; the attention reads each stream's whole keys and values back."""

    def __init__(self, caches: list, lengths: list[int]):
        self.caches, self.lengths = caches, lengths
        self.layers: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        self.layers[layer_idx] = [cache.update(k, v, layer_idx) for cache, k, v in
                                  zip(self.caches, key_states.split(self.lengths, dim=2),
                                      value_states.split(self.lengths, dim=2))]
        return key_states, value_states  # unread: the attention below reads self.layers


def ragged_attention(module, query, key, value, attention_mask, **kwargs):
    """Attention per stream of a ragged forward; any other forward (another engine's, on the same model) gets the
    model's own SDPA."""
    cache = _batch.get()
    if cache is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    outputs, start = [], 0
    for n, (keys, values) in zip(cache.lengths, cache.layers[module.layer_idx]):
        seen = keys.shape[2]
        # the new tokens sit at the end of the stream's keys: token i sees every key up to seen - n + i
        mask = None if n == 1 or n == seen else (
            torch.arange(seen, device=keys.device)[None] <= torch.arange(seen - n, seen, device=keys.device)[:, None])
        out, _ = sdpa_attention_forward(module, query[:, :, start:start + n], keys, values,
                                        None if mask is None else mask[None, None], **kwargs)
        outputs.append(out)
        start += n
    return torch.cat(outputs, dim=1), None


def _attention_configs(model) -> list:
    """The configs the attention modules read their implementation from."""
    found = {id(m.config): m.config for m in model.modules() if hasattr(m, "layer_idx") and hasattr(m, "config")}
    return list(found.values()) or [model.config]


def _cache_kwarg(model) -> str:
    return _cache_kwarg_of(type(model))


@functools.cache
def _cache_kwarg_of(model_class) -> str:
    """transformers 5.x names the cache argument `cache`; earlier versions `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


AttentionInterface.register(RAGGED, ragged_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(RAGGED, sdpa_mask)  # another engine's forward meanwhile builds SDPA's masks
