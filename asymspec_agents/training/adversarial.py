"""`asymspec train-drafter --adversarial`: mine, train, evaluate; print a table and write report.json.

    asymspec train-drafter --adversarial --drafter bundled --verifier bundled --steps 24 --out runs/adv

writes runs/adv/adapter/ (load it with `load_model(drafter, adapter=...)` or
`AsymSpecEngine.from_pretrained(..., drafter_adapter=...)`) and runs/adv/report.json.
Held-out transcripts come from another seed and share no target tool with the training ones.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..engine import DecisionPolicy
from ..models import merge_adapter
from .dpo import TrainSettings, train_adversarial
from .evaluate import agreement, assistant_logits, check_lossless, lossless_prompts
from .mining import mine_pairs
from .transcripts import agent_transcripts


@dataclass
class RunSettings:
    train_items: int = 16
    eval_items: int = 6
    lossless_prompts: int = 3
    tools_per_item: int = 3
    view: str = "comp"
    context_tokens: int | None = 32  # training prompts: the last N tokens before the decision point
    anchors: bool = False  # also pairs right after decision points that keep the verifier's choice (see mine_pairs)
    top_k: int = 10
    max_new_tokens: int = 16
    block: int = 4  # fixed draft block size of the losslessness check
    seed: int = 0


def run(verifier, drafter, tokenizer, out_dir: str | Path, settings: RunSettings | None = None,
        train: TrainSettings | None = None, *, progress: bool = True, metadata: dict | None = None) -> dict:
    """The whole pipeline on loaded models; returns the report (also written to `out_dir/report.json`)."""
    settings, train = settings or RunSettings(), train or TrainSettings()
    out_dir = Path(out_dir)
    policy = DecisionPolicy()
    started = time.perf_counter()

    train_set = agent_transcripts(tokenizer, settings.train_items, settings.seed, tools_per_item=settings.tools_per_item,
                                  view=settings.view)
    held_out = agent_transcripts(tokenizer, settings.eval_items, settings.seed + 1, tools_per_item=settings.tools_per_item,
                                 view=settings.view, exclude_answers={t.answer for t in train_set})
    pairs = mine_pairs(verifier, tokenizer, train_set, policy, context_tokens=settings.context_tokens,
                       top_k=settings.top_k, anchors=settings.anchors, progress=progress)
    mined = time.perf_counter()

    adapter_dir = out_dir / "adapter"
    training = train_adversarial(drafter, tokenizer, pairs, adapter_dir, train, progress=progress, metadata=metadata)
    trained = merge_adapter(drafter, adapter_dir)  # what `load_model(..., adapter=)` gives, without reloading
    trained_at = time.perf_counter()

    verifier_rows = assistant_logits(verifier, held_out, progress=progress)
    before = agreement(verifier, drafter, tokenizer, held_out, policy, verifier_rows=verifier_rows, progress=progress)
    after = agreement(verifier, trained, tokenizer, held_out, policy, verifier_rows=verifier_rows, progress=progress)
    prompts = lossless_prompts(held_out, tokenizer, policy)[: settings.lossless_prompts]
    lossless_before = check_lossless(verifier, drafter, tokenizer, prompts, policy, max_new_tokens=settings.max_new_tokens,
                                     k=settings.block, progress=progress)
    lossless_after = check_lossless(verifier, trained, tokenizer, prompts, policy, max_new_tokens=settings.max_new_tokens,
                                    k=settings.block, progress=progress)
    report = {
        "settings": asdict(settings), "train_settings": asdict(train), **(metadata or {}),
        "train_transcripts": len(train_set), "held_out_transcripts": len(held_out),
        "pairs": len(pairs), "pair_kinds": {kind: sum(p.kind == kind for p in pairs) for kind in ("tool_name", "top_k", "anchor")},
        "training": training.to_dict(),
        "held_out": {"before": before.to_dict(), "after": after.to_dict()},
        "lossless": {"before": lossless_before.to_dict(), "after": lossless_after.to_dict()},
        "seconds": {"mining": mined - started, "training": training.seconds, "evaluation": time.perf_counter() - trained_at,
                    "total": time.perf_counter() - started},
        "adapter_dir": str(adapter_dir),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report, indent=2))
    (out_dir / "pairs.jsonl").write_text("".join(json.dumps(p.to_dict()) + "\n" for p in pairs))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec train-drafter", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    args = parser.parse_args(argv)
    if not args.adversarial:
        parser.error("only adversarial training is implemented: pass --adversarial")
    from ..models import load_model

    verifier, tokenizer = load_model(args.verifier)
    drafter, _ = load_model(args.drafter)
    settings = RunSettings(train_items=args.train_items, eval_items=args.eval_items, lossless_prompts=args.lossless_prompts,
                           view=args.view, context_tokens=args.context_tokens or None, anchors=args.anchors, max_new_tokens=args.max_new_tokens,
                           block=args.block, seed=args.seed)
    train = TrainSettings(steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr, beta=args.beta,
                          lora_r=args.lora_r, lora_alpha=2 * args.lora_r, lora_layers=args.lora_layers or None,
                          seed=args.seed)
    report = run(verifier, drafter, tokenizer, args.out, settings, train, progress=not args.quiet,
                 metadata={"verifier": args.verifier, "drafter": args.drafter})
    print_report(report)
    print(f"adapter: {report['adapter_dir']}  report: {Path(args.out) / 'report.json'}")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--adversarial", action="store_true", help="train the drafter to be rejected at decision points (DPO)")
    p.add_argument("--verifier", default="bundled", help="hub id, folder, .gguf file or 'bundled' (default)")
    p.add_argument("--drafter", default="bundled", help="same forms; must share the verifier's vocabulary")
    p.add_argument("--out", default="runs/adversarial-drafter", help="folder for adapter/, report.json and pairs.jsonl")
    p.add_argument("--steps", type=int, default=24, help="DPO optimizer steps")
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--beta", type=float, default=0.1, help="DPO beta")
    p.add_argument("--lora-r", type=int, default=16, help="LoRA rank (alpha = 2 r)")
    p.add_argument("--lora-layers", type=int, default=8, help="LoRA on the last N decoder layers (0: all)")
    p.add_argument("--train-items", type=int, default=16, help="training transcripts (two decision points each)")
    p.add_argument("--eval-items", type=int, default=6, help="held-out transcripts")
    p.add_argument("--lossless-prompts", type=int, default=3, help="held-out prompts decoded for the losslessness check")
    p.add_argument("--view", default="comp", choices=["comp", "full"], help="which rendered view transcripts use")
    p.add_argument("--context-tokens", type=int, default=32, help="training prompt length before a decision point (0: all)")
    p.add_argument("--anchors", action="store_true",
                   help="also mine anchor pairs right after decision points that keep the verifier's choice")
    p.add_argument("--max-new-tokens", type=int, default=16)
    p.add_argument("--block", type=int, default=4, help="fixed draft block size in the losslessness check")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def print_report(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    before, after = report["held_out"]["before"], report["held_out"]["after"]
    lb, la = report["lossless"]["before"], report["lossless"]["after"]
    table = Table(title=f"adversarial drafter · {report['pairs']} pairs · {report['training']['steps']} steps "
                        f"in {report['training']['seconds']:.0f} s")
    for column in ("held-out measure", "before", "after"):
        table.add_column(column, justify="right")
    table.add_row(f"rejection at decision points ({before['decision_points']})",
                  f"{before['decision_rejection_rate']:.0%}", f"{after['decision_rejection_rate']:.0%}")
    table.add_row(f"acceptance elsewhere ({before['other_positions']} positions)",
                  f"{before['other_acceptance_rate']:.1%}", f"{after['other_acceptance_rate']:.1%}")
    table.add_row(f"  of which right after a decision point ({before['next_positions']})",
                  f"{before['next_acceptance_rate']:.1%}", f"{after['next_acceptance_rate']:.1%}")
    table.add_row("engine, fixed block: decision tokens from accepted drafts",
                  f"{lb['decision_tokens_from_drafts']}/{lb['decision_tokens']}", f"{la['decision_tokens_from_drafts']}/{la['decision_tokens']}")
    table.add_row("engine, fixed block: acceptance", f"{lb['acceptance_rate']:.0%}", f"{la['acceptance_rate']:.0%}")
    table.add_row(f"greedy output == verifier alone ({la['prompts']} prompts)",
                  f"{lb['identical']}/{lb['prompts']}", f"{la['identical']}/{la['prompts']}")
    Console().print(table)
