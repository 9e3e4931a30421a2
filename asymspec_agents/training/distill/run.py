"""The `asymspec distill-drafter` command: examples -> teacher records -> training -> report."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import asdict
from pathlib import Path

from ...errors import ConfigError
from ...models.students import StudentSpec, assemble_student
from ...plotting import pyplot
from .documents import build_document_examples, corpus, written_paragraphs
from .examples import TOOL_KINDS, build_examples, build_tool_examples
from .teacher import teacher_records
from .train import TrainConfig, evaluate_by_kind, train

DEV_SEED_OFFSET = 10_000  # dev examples come from another seed: no prompt is shared with training


def main(argv: list[str] | None = None) -> int:
    report = run(build_parser().parse_args(argv))
    print(render_markdown(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asymspec distill-drafter", description=__doc__)
    parser.add_argument("--verifier", default="bundled", help="the teacher (and the weights the student is cut from)")
    parser.add_argument("--examples", type=int, default=450, help="training prompts")
    parser.add_argument("--dev", type=int, default=60, help="held-out prompts for the report")
    # the defaults are the shipped bundled-small's recipe: tool-call transcripts teach the call format, while the
    # answers from tool outputs cost the student its own reading (docs/training.md)
    parser.add_argument("--tool-examples", type=int, default=120, help="agent-transcript prompts (tool calls, answers "
                        "from tool outputs) added to the training prompts; the dev split gets the same share")
    parser.add_argument("--tool-kinds", nargs="+", choices=list(TOOL_KINDS), default=["tool_call"],
                        help="the transcript kinds trained on (the teacher still answers all, so its shards stay "
                        "valid, and the dev split keeps all to measure each)")
    parser.add_argument("--documents", type=int, default=0, help="long-document prompts (documents.py: facts of "
                        "many kinds, which-part and absent questions, in passages and tool outputs of every length up "
                        "to --document-tokens); the teacher reads an excerpt")
    parser.add_argument("--dev-documents", type=int, default=30, help="held-out long-document prompts (with "
                        "--documents)")
    parser.add_argument("--document-tokens", type=int, nargs=2, default=[400, 7400], metavar=("MIN", "MAX"),
                        help="document lengths in tokens, drawn uniformly")
    parser.add_argument("--written", type=int, default=192, help="texts the verifier writes as a document source "
                        "(sampled once into the teacher cache; 0: none)")
    parser.add_argument("--init", help="start from this drafter's delta (a name such as bundled-agent-small, or a "
                        "folder; same --trunk, --top and --rank)")
    parser.add_argument("--trunk", type=int, default=StudentSpec.trunk, help="first layers copied verbatim (frozen)")
    parser.add_argument("--top", type=int, nargs="+", default=list(StudentSpec.top),
                        help="verifier layers copied above the trunk and trained")
    parser.add_argument("--rank", type=int, default=StudentSpec.rank, help="LoRA rank (0: train whole matrices)")
    parser.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    parser.add_argument("--lr", type=float, default=TrainConfig.lr)
    parser.add_argument("--weights", type=float, nargs=3, default=list(TrainConfig.weights),
                        metavar=("FULL", "COMP", "FUSE"), help="loss weights")
    parser.add_argument("--context-weight", type=float, default=TrainConfig.context_weight)
    parser.add_argument("--engine-prompts", type=int, default=8, help="dev prompts decoded in the engine for the report")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--out", default="runs/distill", help="output folder (checkpoint, student, report)")
    parser.add_argument("--teacher-cache", help="folder of the teacher's shards (default: OUT/teacher); reuse it to "
                        "train other students on the same teacher data")
    return parser


def run(args: argparse.Namespace) -> dict:
    import torch

    from ...models import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    verifier, tokenizer = load_model(args.verifier)
    spec = StudentSpec(trunk=args.trunk, top=tuple(args.top), rank=args.rank,
                       extra={"verifier": args.verifier, "examples": args.examples, "seed": args.seed,
                              "data": "stdlib docstrings: passage QA, early-turn facts, plain questions"
                              + (f"; {args.tool_examples} agent transcripts, trained on {', '.join(args.tool_kinds)}"
                                 if args.tool_examples else "")
                              + (f"; {args.documents} long documents of {args.document_tokens[0]}-"
                                 f"{args.document_tokens[1]} tokens (documents.py)" if args.documents else ""),
                              **({"init": args.init} if args.init else {})})
    started = time.perf_counter()
    cache = Path(args.teacher_cache) if args.teacher_cache else out / "teacher"
    train_set = teacher_records(verifier, tokenizer, build_examples(args.examples, args.seed, tokenizer), cache / "train")
    if args.tool_examples:  # their own shards: the plain examples' shards stay valid with or without them
        transcripts = build_tool_examples(args.tool_examples, args.seed, tokenizer)
        train_set += [r for r in teacher_records(verifier, tokenizer, transcripts, cache / "train-tools")
                      if r.kind in args.tool_kinds]
    dev_set = dev_records(verifier, tokenizer, args, cache)
    sources = None
    if args.documents:
        texts, sources = document_corpus(verifier, tokenizer, args, cache)
        low, high = args.document_tokens
        for count, seed, folder, into in ((args.documents, args.seed, "train-documents", train_set),
                                          (args.dev_documents, args.seed + DEV_SEED_OFFSET, "dev-documents", dev_set)):
            made = build_document_examples(count, seed, tokenizer, texts, min_tokens=low, max_tokens=high)
            into += teacher_records(verifier, tokenizer, made, cache / folder, max_prompt_tokens=high + 512)
    teacher_seconds = time.perf_counter() - started
    config = TrainConfig(epochs=args.epochs, lr=args.lr, weights=tuple(args.weights), context_weight=args.context_weight,
                         seed=args.seed)
    history = train(verifier, spec, train_set, dev_set, out, config, start=starting_delta(args.init))
    student = assemble_student(verifier, out)
    assembled_dev, dev_by_kind = evaluate_by_kind(student, dev_set)
    report = {"spec": asdict(spec), "train_config": asdict(config), "train_records": len(train_set),
              "dev_records": len(dev_set), "reply_tokens": sum(len(r.reply) for r in train_set),
              "teacher_seconds": teacher_seconds, "train_seconds": history["train_seconds"],
              "dev": history["dev"], "assembled_dev": assembled_dev, "dev_by_kind": dev_by_kind,
              "engine": engine_check(verifier, student, tokenizer, dev_set[: args.engine_prompts]),
              "sources": sources, "date": time.strftime("%Y-%m-%d")}
    (out / "report.json").write_text(json.dumps({**report, "steps": history["steps"]}, indent=2) + "\n")
    (out / "report.md").write_text(render_markdown(report))
    plot_losses(history, out / "loss.png")
    return report


def document_corpus(verifier, tokenizer, args: argparse.Namespace, cache: Path):
    """The texts long documents are drawn from (the verifier's own writing sampled once into `cache`) and their
    summary for the report."""
    written = written_paragraphs(verifier, tokenizer, args.written, args.seed, cache / "written.json") \
        if args.written else []
    return corpus(tokenizer, written)


def starting_delta(init: str | None):
    """The delta of the drafter `init` names (a bundled drafter's name or a folder), or None."""
    if init is None:
        return None
    from safetensors.torch import load_file

    from ...models.loading import STUDENTS
    from ...models.students import DELTA_FILE

    path = Path(STUDENTS.get(init, init)) / DELTA_FILE
    if not path.is_file():
        raise ConfigError(f"--init {init}: no {path}; name a bundled drafter ({', '.join(STUDENTS)}) or a folder "
                          "`asymspec distill-drafter` wrote.")
    return load_file(str(path))


def dev_records(verifier, tokenizer, args: argparse.Namespace, cache: Path) -> list:
    """The teacher's records of a run's held-out prompts (its plain ones, then its agent transcripts in the same
    share as in training), from or into the shards under `cache`."""
    seed = args.seed + DEV_SEED_OFFSET
    records = teacher_records(verifier, tokenizer, build_examples(args.dev, seed, tokenizer), cache / "dev")
    if args.tool_examples:
        count = max(1, round(args.tool_examples * args.dev / max(args.examples, 1)))
        transcripts = build_tool_examples(count, seed, tokenizer)
        records += teacher_records(verifier, tokenizer, transcripts, cache / "dev-tools")
    return records


def engine_check(verifier, student, tokenizer, records) -> dict:
    """Acceptance inside the engine, and how often the planted value is in the reply, per system."""
    from ...engine import AsymSpecEngine, GenerationConfig

    engine = AsymSpecEngine(verifier, student, tokenizer)
    systems = {"compressed": dict(mode="compressed"), "full": dict(mode="full"),
               "asymmetric ratio": dict(acceptance="ratio"), "asymmetric fused": dict(acceptance="fused")}
    found = {}
    for name, settings in systems.items():
        drafted = accepted = hits = planted = 0
        for r in records:
            result = engine.generate(r.full, r.comp, GenerationConfig(max_new_tokens=len(r.reply) + 8, decisions=None,
                                                                      **settings))
            drafted, accepted = drafted + result.stats.drafted, accepted + result.stats.accepted
            if r.answer:
                planted += 1
                hits += r.answer in result.text
        found[name] = {"acceptance": accepted / drafted if drafted else None, "planted_found": hits, "planted": planted}
    return found


def render_markdown(report: dict) -> str:
    spec, dev = report["spec"], report["dev"]
    lines = [f"# Distilled drafter ({report['date']})", "",
             f"Student: verifier layers 0..{spec['trunk'] - 1} verbatim + {list(spec['top'])} trained "
             f"(LoRA rank {spec['rank']}); {report['train_records']} training prompts "
             f"({report['reply_tokens']} reply tokens), {report['dev_records']} dev prompts; teacher "
             f"{report['teacher_seconds'] / 60:.1f} min, training {report['train_seconds'] / 60:.1f} min.", "",
             "| epoch | top-1 agreement | fused agreement | on context positions |", "|---|---|---|---|"]
    for row in dev:
        lines.append(f"| {row['epoch']} | {row['top1_agreement']:.3f} | {row['fused_agreement']:.3f} | "
                     f"{row['context_fused_agreement']:.3f} (n={row['context_positions']}) |")
    if "dev_by_kind" in report:
        lines += ["", "The trained student per kind of dev prompt:", "",
                  "| kind | prompts | top-1 agreement | fused agreement | on context positions |",
                  "|---|---|---|---|---|"]
        for kind, row in report["dev_by_kind"].items():
            lines.append(f"| {kind} | {row['records']} | {row['top1_agreement']:.3f} | {row['fused_agreement']:.3f} | "
                         f"{row['context_fused_agreement']:.3f} (n={row['context_positions']}) |")
    lines += ["", "Inside the engine (dev prompts):", "", "| system | acceptance | planted value in reply |", "|---|---|---|"]
    for name, row in report["engine"].items():
        rate = "—" if row["acceptance"] is None else f"{row['acceptance']:.2f}"
        lines.append(f"| {name} | {rate} | {row['planted_found']}/{row['planted']} |")
    return "\n".join(lines) + "\n"


def plot_losses(history: dict, path: Path) -> None:
    plt = pyplot(optional=True)
    if plt is None:
        print("asymspec: matplotlib is not installed; no loss plot (pip install 'asymspec-agents[bench]')")
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = history["steps"]
    epochs = [s["epoch"] for s in steps]
    window = max(1, len(steps) // 40)  # one example's loss swings by 10x: show a running mean over the raw steps
    for name, color in zip(("full", "comp", "fuse", "total"), ("C0", "C1", "C2", "C3")):
        values = [s[name] for s in steps]
        smooth = [statistics.fmean(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]
        ax.plot(epochs, values, color=color, lw=0.5, alpha=0.25)
        ax.plot(epochs, smooth, color=color, lw=1.5, label=f"{name} (mean of {window} steps)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (KL, nats)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("distillation losses")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
