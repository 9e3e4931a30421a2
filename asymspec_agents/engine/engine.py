"""AsymSpecEngine: the public entry point of decoding. Owns the models, the KV streams and the call contract."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import torch

from ..errors import ConfigError, ContextTooLongError, InvalidInputError
from ..errors import VocabularyMismatchError
from ..models import (AUTO, DEFAULT_VERIFIER, check_shared_vocabulary, config_window, load_model,
                      load_tokenizer, resolve_pair)
from ..models.remote import is_remote, is_url
from ..threads import configure_threads, single_core
from .batching import FORWARDS
from .bridge import VocabularyBridge
from .config import MODES, GenerationConfig, Mode
from .constraints import TokenConstraint
from .copying import CopyingStream
from .kv_cache import PRECISIONS
from .loop import DecodingLoop
from .pool import DEFAULT_KV_BUDGET, CachePool, StreamKey, StreamSet
from .remote_stream import RemoteStream
from .stats import GenerationStats
from .streams import KVStream
from .text import IncrementalDecoder, StopMatcher


@dataclass
class StreamChunk:
    """Text and tokens committed since the previous chunk; the last chunk carries finish_reason and stats."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    stats: GenerationStats | None = None


@dataclass
class GenerationResult:
    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" (EOS or a stop string) or "length"
    stats: GenerationStats


class AsymSpecEngine:
    """A verifier and (optionally) a drafter, with prefix KV caches reused across calls.

    When the drafter's tokenizer differs from the verifier's (another model family), a `VocabularyBridge` maps
    between them; token ids passed in and returned are always the verifier's.
    Any number of threads may call one engine. Each conversation keeps its own set of KV streams in a pool
    (pool.py: a call continues the set of its conversation, or branches from the longest shared prefix; least
    recently used sets go when the pool exceeds `kv_budget` bytes; a call that would pass it while others run waits
    for room). Local forwards of all calls run on one thread, one at a time (a CPU forward already uses every
    core), and those that wait together run as one ragged forward
    per model (batching.py): throughput grows with conversations, and a short reply never waits for a long one to
    end. A model on a server (models/remote.py) gets the calls' requests together and batches them itself. Results
    equal serial calls up to the float rounding of a batch (and a server's own, docs/deploy.md).
    """

    def __init__(self, verifier, drafter=None, tokenizer=None, *, drafter_tokenizer=None, kv_cache: str = "float32",
                 bridge_vocabularies: bool = True, kv_budget: int = DEFAULT_KV_BUDGET):
        """`kv_cache`: storage precision of every KV stream, "float32", "bfloat16" or "int8" (see kv_cache.py).
        `kv_budget`: bytes of keys and values the cache pool holds, during calls and between them (default 4 GiB).
        `drafter_tokenizer`: the drafter's own tokenizer when it is not the verifier's; if the two vocabularies
        differ they are bridged (`bridge_vocabularies=False` refuses such a pair instead)."""
        if tokenizer is None:
            raise ConfigError("AsymSpecEngine needs the verifier's tokenizer: AsymSpecEngine(verifier, drafter, tokenizer).")
        self.verifier, self.drafter, self.tokenizer = verifier, drafter, tokenizer
        local = [m for m in (verifier, drafter) if m is not None and not is_remote(m)]
        self.drafter_tokenizer = drafter_tokenizer if drafter_tokenizer is not None else tokenizer
        # a served model's generation config is not visible here: a local one of its family stands in
        self.eos_token_ids = _eos_ids(tokenizer, local[0] if local else verifier)
        self.bridge: VocabularyBridge | None = None
        try:
            self.vocab_size = check_shared_vocabulary(tokenizer, self.drafter_tokenizer, *(
                None if m is None or is_remote(m) else m for m in (verifier, drafter)))  # a server's: checked by it
        except VocabularyMismatchError:
            if not bridge_vocabularies or drafter_tokenizer is None or drafter is None or len(local) < 2:
                raise
            self.vocab_size = check_shared_vocabulary(tokenizer, tokenizer, verifier)
            drafter_vocab = check_shared_vocabulary(drafter_tokenizer, drafter_tokenizer, drafter)
            self.bridge = VocabularyBridge(tokenizer, drafter_tokenizer, verifier_vocab=self.vocab_size,
                                           drafter_vocab=drafter_vocab, verifier_eos=self.eos_token_ids,
                                           drafter_eos=_eos_ids(drafter_tokenizer, drafter))
            print(f"asymspec: {self.bridge.describe()}", file=sys.stderr)
        models = [m for m in (verifier, drafter) if m is not None]
        self.context_window = min(_window(m) for m in models)
        if kv_cache not in PRECISIONS:
            raise ConfigError(f"kv_cache must be one of {', '.join(PRECISIONS)}, got {kv_cache!r}.")
        self.kv_cache = kv_cache
        if kv_budget < 0:
            raise ConfigError(f"kv_budget is a number of bytes >= 0, got {kv_budget!r}.")
        self.pool = CachePool(self._new_stream, kv_budget)

    @classmethod
    def from_pretrained(cls, verifier: str = DEFAULT_VERIFIER, drafter: str | None = AUTO, *,
                        dtype: torch.dtype = torch.float32, device: str = "cpu", kv_cache: str = "float32",
                        drafter_adapter: str | None = None, kv_budget: int = DEFAULT_KV_BUDGET,
                        tokenizer: str | None = None, threads: int | None = None) -> "AsymSpecEngine":
        """Load from hub ids, local folders, GGUF files, "bundled" (SmolLM2-135M-Instruct), "bundled-agent" (it,
        tuned to act as an agent), "bundled-agent-small" and "bundled-small" (6-layer drafters distilled from each)
        or "bundled-gemma" (Gemma-3-270M base); "http://host:port/v1" is a model on a vLLM server (models/remote.py),
        verifier, drafter or both (then no weights load here). The defaults are the default pair of every entry
        point: bundled-agent verifying for bundled-agent-small. `drafter="auto"`: the verifier's matched drafter
        (bundled-agent-small for bundled-agent, bundled-small for bundled, a family's small sibling for known hub
        ids such as Qwen/Qwen3-32B; any other verifier raises ConfigError: name its drafter);
        `drafter=None` allows only `full`/`compressed`. A pair name: `verifier="bundled-hetero"` is Gemma-3-270M
        verified, SmolLM2-135M drafting, across a vocabulary bridge.

        `drafter_adapter`: a peft adapter folder merged into the drafter (e.g. from `asymspec train-drafter`).
        `tokenizer`: the pair's tokenizer (hub id or folder) when both models are on servers whose model folders
        this machine cannot read; otherwise a local model's, or the served folder's, is used.
        `threads`: torch's CPU threads for this process (default: `OMP_NUM_THREADS`, else the cores the machine's
        load leaves free; threads.py)."""
        configure_threads(threads)
        names = dict(zip(("verifier", "drafter"), resolve_pair(verifier, drafter)))
        roles = sorted((role for role, name in names.items() if name is not None), key=lambda r: is_url(names[r]))
        given = load_tokenizer(tokenizer) if tokenizer is not None and any(map(is_url, names.values())) else None
        models, tokenizers = {"drafter": None}, {"drafter": None}
        for role in roles:  # local models first: a server is checked against their tokenizer
            models[role], tokenizers[role] = load_model(
                names[role], dtype=dtype, device=device, adapter=drafter_adapter if role == "drafter" else None,
                tokenizer=next((t for t in tokenizers.values() if t is not None), given))
        return cls(models["verifier"], models["drafter"], tokenizers["verifier"],
                   drafter_tokenizer=tokenizers["drafter"], kv_cache=kv_cache, kv_budget=kv_budget)

    @classmethod
    def shared(cls, verifier: str = DEFAULT_VERIFIER, drafter: str | None = AUTO, *,
               dtype: torch.dtype = torch.float32, device: str = "cpu", kv_cache: str = "float32",
               kv_budget: int = DEFAULT_KV_BUDGET, tokenizer: str | None = None) -> "AsymSpecEngine":
        """One engine per (verifier, drafter, dtype, device, KV settings) in this process: chat models built with
        the same names share its models and cache pool instead of loading them again."""
        verifier, drafter = resolve_pair(verifier, drafter)
        key = (str(verifier), None if drafter is None else str(drafter), dtype, device, kv_cache, kv_budget, tokenizer)
        with _shared_lock:
            if key not in _shared:
                _shared[key] = cls.from_pretrained(verifier, drafter, dtype=dtype, device=device, kv_cache=kv_cache,
                                                   kv_budget=kv_budget, tokenizer=tokenizer)
            return _shared[key]

    def generate(self, full_ids: Sequence[int] | None = None, comp_ids: Sequence[int] | None = None,
                 config: GenerationConfig | None = None, *, constraint: TokenConstraint | None = None,
                 cache_scope: str | None = None, **overrides) -> GenerationResult:
        """Decode one reply. `comp_ids` defaults to `full_ids` (lossless compression) and vice versa.

        `constraint` (e.g. a GrammarConstraint for a JSON schema) restricts every committed token; it is a fresh,
        stateful object per call. `cache_scope` (a tenant) reuses only caches of calls with the same scope.
        Keyword overrides replace fields of `config`.
        """
        text, tokens = [], []
        for chunk in self.stream(full_ids, comp_ids, config, constraint=constraint, cache_scope=cache_scope,
                                 **overrides):
            text.append(chunk.text)
            tokens.extend(chunk.token_ids)
        return GenerationResult(tokens, "".join(text), chunk.finish_reason, chunk.stats)

    def stream(self, full_ids: Sequence[int] | None = None, comp_ids: Sequence[int] | None = None,
               config: GenerationConfig | None = None, *, constraint: TokenConstraint | None = None,
               cache_scope: str | None = None, **overrides) -> Iterator[StreamChunk]:
        """Yield committed text as blocks are accepted; stop strings are never emitted, not even in part."""
        config = replace(config or GenerationConfig(), **overrides) if overrides else (config or GenerationConfig())
        config = self.decoding(config)
        mode = self._check_mode(config)
        return self._stream(self._prompts(full_ids, comp_ids, mode), mode, config, constraint, cache_scope)

    def decoding(self, config: GenerationConfig) -> GenerationConfig:
        """What a call with `config` decodes with: its defaults filled in, and no copy head where the drafter is on
        a server (which sends its top rows only) unless the call asks for one."""
        if config.copy_weight is None and is_remote(self.drafter):
            config = replace(config, copy_weight=0.0)
        return config.resolved()

    def prefill(self, full_ids: Sequence[int] | None = None, comp_ids: Sequence[int] | None = None, *,
                cache_scope: str | None = None) -> None:
        """Read a prompt into every stream ahead of time (all but its last token), so that calls in any mode on
        it (or on a conversation extending it) start from a warm cache."""
        prompts = self._prompts(full_ids, comp_ids, MODES["asymmetric"])  # every view: any mode may follow
        with self.pool.acquire(prompts, set(prompts), cache_scope) as (streams, _):
            for view in ("full", "comp"):
                verifier = streams.stream("verifier", view)
                verifier.sync(prompts["verifier", view])
                if self.drafter is not None:
                    streams.stream("drafter", view).sync(prompts["drafter", view], donors=[verifier])

    def reset(self) -> None:
        """Forget every cached prefix (a call in progress keeps its caches until it ends)."""
        self.pool.clear()

    # -------------------------------------------------------------------------------------------------------

    def _stream(self, prompts: dict[StreamKey, list[int]], mode: Mode, config: GenerationConfig,
                constraint: TokenConstraint | None, cache_scope: str | None = None) -> Iterator[StreamChunk]:
        # the most each stream may grow: the reply, and a draft block past it
        new_tokens = config.max_new_tokens + (config.k_max or 0) + 1
        with self.pool.acquire(prompts, mode.streams, cache_scope, new_tokens) as (streams, how):
            started = time.perf_counter()
            loop = self._loop(streams, prompts, mode, config, constraint)
            loop.stats.cache = how
            decoder = IncrementalDecoder(self.tokenizer)
            stops = StopMatcher(config.stop)
            finish = None
            blocks = loop.run()
            try:
                while True:
                    # one block; other calls' forwards run beside it, on the forward thread, which has the cores
                    # (threads.py) and waits a moment for this call's forwards to batch them (not while the
                    # caller holds the stream between blocks)
                    with single_core(), FORWARDS.call():
                        tokens = next(blocks, None)
                    if tokens is None:
                        break
                    ended = loop.finish_reason is not None
                    visible = tokens[:-1] if tokens and tokens[-1] in self.eos_token_ids else tokens
                    text, hit = stops.push(decoder.push(visible) + (decoder.flush() if ended else ""))
                    if hit:
                        finish = "stop"
                        yield StreamChunk(text, tokens)
                        break
                    if ended:
                        text += stops.flush()
                    if text or tokens:
                        yield StreamChunk(text, tokens)
            finally:
                blocks.close()
            stats = loop.stats
            stats.streams = {s.name: s.stats for s in loop.streams}
            stats.wall_seconds = time.perf_counter() - started
        yield StreamChunk("", [], finish or loop.finish_reason, stats)

    def _check_mode(self, config: GenerationConfig) -> Mode:
        mode = MODES[config.mode]
        if mode.draft and self.drafter is None:
            raise ConfigError(f"Mode {config.mode!r} needs a drafter; build the engine with one, or use mode 'full'/'compressed'.")
        if mode.draft and config.copy_weight and is_remote(self.drafter):
            raise ConfigError("copy_weight mixes the drafter's whole rows, which a drafter on a server does not send; "
                              "load the drafter here or leave copy_weight unset (a served drafter then has none).")
        if mode.contrast and self.bridge is not None and config.delta_source == "scd":
            raise ConfigError("delta_source='scd' (t − b) subtracts the drafter's log-probabilities from the verifier's, "
                              "which needs one vocabulary; this pair is bridged: use 'contrast' or 'full_only'.")
        return mode

    def _loop(self, streams: StreamSet, prompts: dict[StreamKey, list[int]], mode: Mode, config: GenerationConfig,
              constraint: TokenConstraint | None) -> DecodingLoop:
        stats = GenerationStats(config.mode, len(prompts["verifier", "full"]), len(prompts["verifier", "comp"]))
        verify = streams.stream("verifier", mode.verify)
        draft = streams.stream("drafter", mode.draft) if mode.draft else None
        contrast = streams.stream("drafter", "comp") if mode.contrast else None
        for stream in (verify, draft, contrast):
            if stream is not None:
                stream.start_call()  # stats count this call only; the cache carries over
        if config.copy_weight:  # the copy head reads each view's own prompt (copying.py)
            draft, contrast = (None if s is None else CopyingStream(s, prompts["drafter", s.view], config.copy_weight)
                               for s in (draft, contrast))
        longest = len(prompts["verifier", mode.verify])
        for view in mode.drafter_views:
            longest = max(longest, self._check_window(prompts["drafter", view], view, "drafter's"))
        max_new = min(config.max_new_tokens, self.context_window - longest)
        return DecodingLoop(config=config, prompts=prompts, verify=verify, draft=draft, contrast=contrast,
                            tokenizer=self.tokenizer, eos_ids=self.eos_token_ids, max_new_tokens=max_new, stats=stats,
                            constraint=constraint, bridge=self.bridge if mode.draft else None)

    def _new_stream(self, role: str, view: str) -> KVStream | RemoteStream:
        model = self.verifier if role == "verifier" else self.drafter
        if is_remote(model):
            return RemoteStream(model, role, view, self.vocab_size)
        vocab = self.bridge.drafter_vocab if self.bridge is not None and role == "drafter" else self.vocab_size
        return KVStream(model, role, view, vocab, self.kv_cache)

    def _prompts(self, full_ids, comp_ids, mode: Mode) -> dict[StreamKey, list[int]]:
        """Every stream's prompt a call in `mode` knows, by (role, view), for the pool to match and the loop to
        read: the verifier's two views and the drafter's, the same ids or (across a vocabulary bridge) the text of
        just the views `mode` has it read, re-encoded in its own tokens."""
        if full_ids is None and comp_ids is None:
            raise InvalidInputError("Pass full_ids and/or comp_ids: the token ids of the prompt (e.g. from DualContext.render).")
        full = self._checked_ids(full_ids if full_ids is not None else comp_ids, "full_ids")
        comp = self._checked_ids(comp_ids if comp_ids is not None else full_ids, "comp_ids")
        views = {"full": full, "comp": comp}
        for _, view in mode.streams:
            self._check_window(views[view], view)
        prompts = {("verifier", view): ids for view, ids in views.items()}
        if self.drafter is not None:
            prompts.update({("drafter", view): self.bridge.drafter_prompt(views[view]) for view in mode.drafter_views}
                           if self.bridge is not None else {("drafter", view): ids for view, ids in views.items()})
        return prompts

    def _check_window(self, ids: list[int], view: str, whose: str = "") -> int:
        if len(ids) >= self.context_window:
            raise ContextTooLongError(
                f"The {view} view has {len(ids)} {whose + ' ' if whose else ''}tokens but the models' context window "
                f"is {self.context_window}; compress the conversation harder or drop old turns."
            )
        return len(ids)

    def _checked_ids(self, ids, name: str) -> list[int]:
        if isinstance(ids, torch.Tensor):
            ids = ids.reshape(-1).tolist()
        ids = list(ids)
        if not ids:
            raise InvalidInputError(f"{name} is empty; a prompt needs at least one token (render the chat template first).")
        bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < self.vocab_size]
        if bad:
            raise InvalidInputError(
                f"{name} holds {len(bad)} ids outside the vocabulary [0, {self.vocab_size}) (first: {bad[0]!r}); "
                "encode the prompt with the verifier's tokenizer."
            )
        return ids


_shared: dict[tuple, AsymSpecEngine] = {}
_shared_lock = threading.Lock()


def _eos_ids(tokenizer, model) -> set[int]:
    ids: set[int] = set()
    for source in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None), model.config.eos_token_id):
        if source is None:
            continue
        ids.update(source if isinstance(source, (list, tuple, set)) else [source])
    return {int(i) for i in ids}


def _window(model) -> int:
    return config_window(model.config)
