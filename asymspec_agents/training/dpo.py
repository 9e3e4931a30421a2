"""DPO training of a LoRA adapter on the drafter, with trl's `DPOTrainer` and peft.

The pairs are already token ids (mined at exact token positions; decoding and re-encoding could merge tokens
across the decision boundary), so the trainer's text tokenization is skipped and its preference collator reads
`prompt_ids` / `chosen_ids` / `rejected_ids` directly. The reference policy is the drafter itself with the
adapter disabled (peft), so no second copy of the model is kept. LoRA goes on the attention projections of the
last `lora_layers` layers only: the gradient then stops there, which keeps a CPU run to seconds per step.
"""

from __future__ import annotations

import copy
import functools
import json
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import ConfigError, ModelLoadError
from .mining import PreferencePair

ADAPTER_META = "asymspec_adapter.json"


@dataclass
class TrainSettings:
    steps: int = 24
    batch_size: int = 2
    learning_rate: float = 5e-4
    beta: float = 0.1  # DPO's β: how far the policy may move from the reference
    lora_r: int = 16
    lora_alpha: int = 32
    lora_layers: int | None = 8  # LoRA on the last N decoder layers; None: all layers
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    seed: int = 0


@dataclass
class TrainReport:
    steps: int
    pairs: int
    seconds: float
    losses: list[float] = field(default_factory=list)  # per logged step
    reward_accuracies: list[float] = field(default_factory=list)
    adapter_dir: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def train_adversarial(drafter, tokenizer, pairs: list[PreferencePair], out_dir: str | Path,
                      settings: TrainSettings | None = None, *, progress: bool = True,
                      metadata: dict | None = None) -> TrainReport:
    """Train a LoRA adapter on a copy of `drafter` (the given model is left untouched) and save it to `out_dir`."""
    settings = settings or TrainSettings()
    if not pairs:
        raise ConfigError("No preference pairs to train on: the transcripts had no decision points the policy tags.")
    if settings.steps < 1 or settings.batch_size < 1:
        raise ConfigError(f"steps and batch_size must be >= 1, got {settings.steps} and {settings.batch_size}.")
    datasets, trl, peft = _training_libraries()
    import transformers

    model = copy.deepcopy(drafter)  # peft injects LoRA layers in place; shared models must not change
    model.train()
    model = peft.get_peft_model(model, _lora_config(peft, model, settings))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="asymspec-dpo-") as scratch, warnings.catch_warnings():
        # trl 1.16 still calls transformers' gradient-checkpointing names that transformers 5 deprecates
        warnings.filterwarnings("ignore", category=FutureWarning, message=".*(gradient|activation)_checkpointing")
        args = trl.DPOConfig(
            output_dir=scratch, max_steps=settings.steps, per_device_train_batch_size=settings.batch_size,
            learning_rate=settings.learning_rate, beta=settings.beta, lr_scheduler_type="constant",
            warmup_steps=0, logging_steps=max(1, settings.steps // 8), save_strategy="no", report_to="none", use_cpu=True,
            seed=settings.seed, data_seed=settings.seed, disable_tqdm=not progress, dataloader_num_workers=0,
            max_length=None, bf16=False, fp16=False,
        )
        trainer = _pretokenized_trainer(trl)(
            model=model, args=args, processing_class=tokenizer,
            train_dataset=datasets.Dataset.from_list([pair.to_record() for pair in pairs]),
        )
        if not progress:  # without progress bars the trainer prints each log row instead; keep it quiet
            trainer.remove_callback(transformers.PrinterCallback)
        trainer.train()
        history = trainer.state.log_history
        seconds = time.perf_counter() - started
        model.save_pretrained(str(out_dir))
    report = TrainReport(
        steps=settings.steps, pairs=len(pairs), seconds=seconds,
        losses=[row["loss"] for row in history if "loss" in row],
        reward_accuracies=[row["rewards/accuracies"] for row in history if "rewards/accuracies" in row],
        adapter_dir=str(out_dir),
    )
    meta = {"kind": "adversarial-decision-points", "settings": asdict(settings), "report": report.to_dict(), **(metadata or {})}
    (out_dir / ADAPTER_META).write_text(json.dumps(meta, indent=2))
    return report


def _lora_config(peft, model, settings: TrainSettings):
    layers = None
    if settings.lora_layers:
        count = model.config.get_text_config().num_hidden_layers
        layers = list(range(max(0, count - settings.lora_layers), count))
    return peft.LoraConfig(
        task_type="CAUSAL_LM", r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=0.0,
        target_modules=list(settings.target_modules), layers_to_transform=layers,
    )


def _training_libraries():
    try:
        import datasets
        import peft
        import trl
    except ImportError as exc:
        raise ModelLoadError(
            f"Training a drafter needs trl and peft ({exc}); install them with "
            "`pip install 'asymspec-agents[train]'`."
        ) from exc
    return datasets, trl, peft


@functools.cache
def _pretokenized_trainer(trl):
    class PretokenizedDPOTrainer(trl.DPOTrainer):
        """Reads rows that are already `prompt_ids` / `chosen_ids` / `rejected_ids`; adds no EOS."""

        def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
            return dataset

    return PretokenizedDPOTrainer
