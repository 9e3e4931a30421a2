"""Drafters made from a verifier's own weights: a subset of its decoder layers with its embedding, final norm and
(tied) output head, plus a small trained delta (docs/design.md §8).

A `StudentSpec` names the layers: the first `trunk` layers verbatim, then copies of the verifier's layers `top`
(the ones `asymspec distill-drafter` trains). A delta file (safetensors) holds what training changed: low-rank
factors `<weight>.lora_A` / `.lora_B` for the trained layers' matrices (W += α/r · B·A) and whole tensors for small
ones (norms). `assemble_student` builds the drafter from the verifier and a delta; no training library is needed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from ..errors import ConfigError, ModelLoadError

SPEC_FILE = "student.json"
DELTA_FILE = "delta.safetensors"


@dataclass(frozen=True)
class StudentSpec:
    trunk: int = 4  # the verifier's first layers, copied verbatim and never trained
    top: tuple[int, ...] = (17, 18)  # verifier layers copied above the trunk and trained (retrieval heads live there)
    rank: int = 64  # LoRA rank of the trained layers' matrices; 0 trains (and stores) them whole
    alpha: float = 64.0
    extra: dict = field(default_factory=dict)  # recipe notes carried into student.json (data, steps, seed)

    def __post_init__(self):
        object.__setattr__(self, "top", tuple(self.top))
        if self.trunk < 0 or not (self.trunk or self.top):
            raise ConfigError(f"a student needs at least one layer, got trunk={self.trunk}, top={self.top}.")
        if self.rank < 0:
            raise ConfigError(f"rank must be >= 0 (0: train whole matrices), got {self.rank}.")

    @property
    def layers(self) -> list[int]:
        return list(range(self.trunk)) + list(self.top)

    @property
    def trained(self) -> range:
        """Indices, in the student, of the trained layers."""
        return range(self.trunk, self.trunk + len(self.top))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "StudentSpec":
        return cls(**json.loads(text))


def layer_subset(model, layers: Sequence[int]):
    """A new model holding copies of `model`'s decoder layers `layers` (in this order) and everything around them.

    Per-layer settings that some architectures keep in their config (Gemma 3's `layer_types`) follow the layers.
    The result is independent of `model` (its own tensors), so training it leaves the verifier untouched."""
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    total = text.num_hidden_layers
    layers = list(layers)
    if not layers or any(not isinstance(i, int) or not 0 <= i < total for i in layers):
        raise ConfigError(f"layers must be a non-empty list of layer indices in [0, {total}), got {layers!r}.")
    text.num_hidden_layers = len(layers)
    if getattr(text, "layer_types", None) is not None:
        text.layer_types = [text.layer_types[i] for i in layers]
    renamed = {f".layers.{j}.": f".layers.{i}." for j, i in enumerate(layers)}
    state = model.state_dict()
    student = AutoModelForCausalLM.from_config(config, dtype=next(model.parameters()).dtype)
    weights = {}
    for name in student.state_dict():
        source = next((name.replace(mine, theirs, 1) for mine, theirs in renamed.items() if mine in name), name)
        weights[name] = state[source].detach().clone()
    student.load_state_dict(weights, strict=True)
    if getattr(text, "tie_word_embeddings", False):
        student.tie_weights()
    student.generation_config = copy.deepcopy(model.generation_config)
    return student.to(next(model.parameters()).device).eval()


def apply_delta(student, delta: dict[str, torch.Tensor], spec: StudentSpec) -> None:
    """Merge a delta into `student` in place: low-rank factors add α/r·B·A to their matrix, whole tensors replace."""
    params = dict(student.named_parameters())
    scale = spec.alpha / spec.rank if spec.rank else 0.0
    with torch.no_grad():
        for name, tensor in delta.items():
            if name.endswith(".lora_A"):
                target = name[: -len(".lora_A")]
                update = delta[target + ".lora_B"].float() @ tensor.float()
                params[target] += scale * update.to(params[target].device, params[target].dtype)
            elif not name.endswith(".lora_B"):
                if name not in params:
                    raise ModelLoadError(f"the delta names {name!r}, which this student does not have; was it trained "
                                         "for another verifier or layer spec?")
                params[name].copy_(tensor.to(params[name].device, params[name].dtype))


def assemble_student(verifier, folder: str | Path):
    """The drafter a distillation run saved in `folder` (student.json + delta.safetensors), built from `verifier`."""
    from safetensors.torch import load_file

    folder = Path(folder)
    if not (folder / SPEC_FILE).is_file() or not (folder / DELTA_FILE).is_file():
        raise ModelLoadError(f"{folder} holds no {SPEC_FILE} and {DELTA_FILE}; pass the folder "
                             "`asymspec distill-drafter` wrote its student to.")
    spec = StudentSpec.from_json((folder / SPEC_FILE).read_text())
    student = layer_subset(verifier, spec.layers)
    apply_delta(student, load_file(str(folder / DELTA_FILE)), spec)
    return student.eval()
