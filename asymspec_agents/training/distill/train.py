"""Train a student (a layer subset of the verifier) to match the teacher on both views and in its contrast.

Losses at every reply position, over the teacher's candidate set C (teacher log-probabilities renormalized on C,
the student's taken from its full softmax), a = student on the full view, b = on the compressed view:
- `full`: KL(p_T(·|full) ‖ p_S(·|full)), the usual distillation (drafts the verifier accepts);
- `comp`: KL(p_T(·|comp) ‖ p_S(·|comp)) (the ratio rule compares p_V with p_S(·|comp));
- `fuse`: KL(p_T(·|full) ‖ softmax(log p_T(·|comp) + a − b)): what AsymSpec emits from t + δ should be what the
  teacher says with the whole context. With an exact student δ_S = δ_T and this is 0.
Positions where the teacher's two views disagree on the top token weigh `context_weight` times more.
Only the trained layers change: LoRA factors on their matrices (rank > 0) or the matrices themselves, and their
norms; the trunk, embedding and head stay the verifier's.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from ...errors import ConfigError
from ...models.students import DELTA_FILE, SPEC_FILE, StudentSpec, layer_subset
from .teacher import TeacherRecord, reply_log_probs

LOSSES = ("full", "comp", "fuse")


@dataclass
class TrainConfig:
    epochs: int = 3  # the defaults are the shipped bundled-small's recipe
    lr: float = 1e-3
    accumulate: int = 4  # examples per optimizer step
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)  # full, comp, fuse
    context_weight: float = 3.0
    clip: float = 1.0
    seed: int = 0


class LoRALinear(nn.Module):
    """y = W x + α/r · B A x with W frozen; B starts at 0, so training starts from the copied layer."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base, self.scale = base, alpha / rank
        # drawn on the CPU whatever the device, so a seed gives the same start on a GPU
        start = torch.randn(rank, base.in_features, dtype=base.weight.dtype) / math.sqrt(base.in_features)
        self.lora_A = nn.Parameter(start.to(base.weight.device))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, dtype=base.weight.dtype,
                                               device=base.weight.device))

    def forward(self, x):
        return self.base(x) + self.scale * ((x @ self.lora_A.T) @ self.lora_B.T)


def trainable_student(verifier, spec: StudentSpec):
    """The student with only its trained layers' LoRA factors (or matrices) and norms requiring grad."""
    student = layer_subset(verifier, spec.layers)
    for p in student.parameters():
        p.requires_grad_(False)
    for index in spec.trained:
        layer = student.model.layers[index]
        for parent in list(layer.modules()):
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):
                    if spec.rank:
                        setattr(parent, name, LoRALinear(child, spec.rank, spec.alpha))
                    else:
                        child.weight.requires_grad_(True)
        for name, p in layer.named_parameters():
            if "norm" in name:
                p.requires_grad_(True)
    return student


def load_delta(student, delta: dict[str, torch.Tensor]) -> None:
    """Start training from a saved delta (a drafter distilled before, same layers and rank): its factors and norms
    go into the trainable student's parameters."""
    params = dict(student.named_parameters())
    with torch.no_grad():
        for name, tensor in delta.items():
            module, _, factor = name.rpartition(".weight.")
            target = f"{module}.{factor}" if factor in ("lora_A", "lora_B") else name
            if target not in params or params[target].shape != tensor.shape:
                raise ConfigError(f"the starting delta names {name!r} {tuple(tensor.shape)}, which this student does "
                                  "not train: start from a drafter of the same --trunk, --top and --rank.")
            params[target].copy_(tensor)


def delta_of(student, spec: StudentSpec) -> dict[str, torch.Tensor]:
    """What training changed, in the delta format of `models.students` (keys of the plain, merged student)."""
    out = {}
    for name, p in student.named_parameters():
        if not p.requires_grad:
            continue
        plain = name.replace(".base.", ".")
        if name.endswith(("lora_A", "lora_B")):
            module = name.rsplit(".", 1)[0]
            out[f"{module}.weight.{name.rsplit('.', 1)[1]}"] = p.detach().clone().contiguous()
        else:
            out[plain] = p.detach().clone().contiguous()
    return out


def losses(student, record: TeacherRecord, weights, context_weight: float) -> dict[str, torch.Tensor]:
    cand = record.candidates.long()
    a = reply_log_probs(student, record.full, record.reply).gather(-1, cand)
    b = reply_log_probs(student, record.comp, record.reply).gather(-1, cand)
    t_full = torch.log_softmax(record.lp_full.float(), -1)
    t_comp = torch.log_softmax(record.lp_comp.float(), -1)
    weight = 1.0 + (context_weight - 1.0) * (t_full.argmax(-1) != t_comp.argmax(-1)).float()  # [n]
    weight = weight / weight.sum()
    parts = {"full": _kl(t_full, a), "comp": _kl(t_comp, b),
             "fuse": _kl(t_full, torch.log_softmax(t_comp + a - b, -1))}
    out = {name: (value * weight).sum() for name, value in parts.items()}
    out["total"] = sum(w * out[name] for w, name in zip(weights, LOSSES))
    return out


def evaluate(student, records: list[TeacherRecord]) -> dict:
    """Teacher-forced agreement on held-out records: the student's top token on the full view, the fused emission
    argmax(log p_T(comp) + a − b) against the teacher's full-view token, and that on the positions where the
    teacher's two views disagree (where context matters)."""
    return evaluate_by_kind(student, records)[0]


def evaluate_by_kind(student, records: list[TeacherRecord]) -> tuple[dict, dict[str, dict]]:
    """`evaluate` over all records and per kind of prompt (with its record count), in one pass."""
    totals, per_kind = Counter(), {}
    with torch.no_grad():
        for r in records:
            cand = r.candidates.long()
            a = reply_log_probs(student, r.full, r.reply).gather(-1, cand)
            b = reply_log_probs(student, r.comp, r.reply).gather(-1, cand)
            t_full, t_comp = r.lp_full.float(), r.lp_comp.float()
            target = t_full.argmax(-1)
            fused = (t_comp + a - b).argmax(-1) == target
            context = target != t_comp.argmax(-1)
            counts = Counter(records=1, positions=len(target), top1=int((a.argmax(-1) == target).sum()),
                             fused=int(fused.sum()), context=int(context.sum()),
                             context_fused=int((fused & context).sum()))
            totals += counts
            per_kind[r.kind] = per_kind.get(r.kind, Counter()) + counts
    return _rates(totals), {kind: {"records": c["records"], **_rates(c)} for kind, c in sorted(per_kind.items())}


def _rates(counts: Counter) -> dict:
    n, c = max(counts["positions"], 1), max(counts["context"], 1)
    return {"top1_agreement": counts["top1"] / n, "fused_agreement": counts["fused"] / n,
            "context_positions": counts["context"], "context_fused_agreement": counts["context_fused"] / c}


def train(verifier, spec: StudentSpec, train_records: list[TeacherRecord], dev_records: list[TeacherRecord],
          out_dir: str | Path, config: TrainConfig | None = None, *, start: dict | None = None,
          progress: bool = True) -> dict:
    """Train, checkpointing after every epoch (an interrupted run resumes from the last one); writes the student
    (student.json, delta.safetensors) and returns the training history. `start`: a delta to start from."""
    from safetensors.torch import save_file

    config = config or TrainConfig()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    student = trainable_student(verifier, spec).train()
    if start is not None:
        load_delta(student, start)
    params = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.lr, weight_decay=0.0)
    checkpoint = out_dir / "checkpoint.pt"
    if checkpoint.is_file():  # resume: the history (its epoch-0 scores included) comes with the checkpoint
        state = torch.load(checkpoint, weights_only=False)
        student.load_state_dict(state["student"], strict=False)
        optimizer.load_state_dict(state["optimizer"])
        history, first_epoch = state["history"], state["epoch"]
    else:
        history, first_epoch = {"steps": [], "dev": [{"epoch": 0, **evaluate(student, dev_records)}]}, 0
    total = config.epochs * len(train_records)
    bar = tqdm(total=total, initial=first_epoch * len(train_records), desc="distill", unit="example",
               disable=not progress)
    started = time.perf_counter()
    for epoch in range(first_epoch, config.epochs):
        order = list(range(len(train_records)))
        random.Random(config.seed * 1000 + epoch).shuffle(order)
        running = {name: 0.0 for name in (*LOSSES, "total")}
        for i, index in enumerate(order):
            parts = losses(student, train_records[index], config.weights, config.context_weight)
            (parts["total"] / config.accumulate).backward()
            for name in running:
                running[name] += float(parts[name].detach())
            if (i + 1) % config.accumulate == 0 or i + 1 == len(order):
                torch.nn.utils.clip_grad_norm_(params, config.clip)
                optimizer.step()
                optimizer.zero_grad()
                seen = (i % config.accumulate) + 1
                history["steps"].append({"epoch": epoch + (i + 1) / len(order),
                                         **{name: value / seen for name, value in running.items()}})
                running = {name: 0.0 for name in running}
                bar.set_postfix(loss=f"{history['steps'][-1]['total']:.3f}")
            bar.update()
        student.eval()
        history["dev"].append({"epoch": epoch + 1, **evaluate(student, dev_records)})
        student.train()
        torch.save({"student": {k: v for k, v in student.state_dict().items() if "lora" in k or "norm" in k or spec.rank == 0},
                    "optimizer": optimizer.state_dict(), "history": history, "epoch": epoch + 1}, checkpoint)
    bar.close()
    history["train_seconds"] = time.perf_counter() - started
    save_file(delta_of(student, spec), str(out_dir / DELTA_FILE))
    (out_dir / SPEC_FILE).write_text(spec.to_json())
    history["config"] = asdict(config)
    return history


def _kl(target: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(exp(target) ‖ exp(log_q)) per row over the candidate set."""
    return (target.exp() * (target - log_q)).sum(-1)
