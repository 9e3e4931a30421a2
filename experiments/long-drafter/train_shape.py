"""Train a drafter of another shape on a finished run's teacher shards, as they are (the shards' fingerprints are
not checked: the examples they were made from may predate a change to the example builders).

    python experiments/long-drafter/train_shape.py TEACHER_DIR OUT --top 17 18 20 21 23 [--trunk 4 --rank 64]

Writes OUT/student.json, OUT/delta.safetensors (a folder any --drafter option loads) and OUT/report.json."""

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from asymspec_agents.models import load_model
from asymspec_agents.models.students import StudentSpec, assemble_student
from asymspec_agents.training.distill.train import TrainConfig, evaluate_by_kind, train

DEV = ("dev", "dev-tools", "dev-documents")


def shards(teacher: Path, folders) -> list:
    records = []
    for folder in folders:
        for path in sorted((teacher / folder).glob("teacher-*.pt")):
            records += torch.load(path, weights_only=False)["records"]
    return records


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("teacher")
    parser.add_argument("out")
    parser.add_argument("--verifier", default="bundled-agent")
    parser.add_argument("--trunk", type=int, default=4)
    parser.add_argument("--top", type=int, nargs="+", default=[17, 18])
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=TrainConfig.lr)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    teacher, out = Path(args.teacher), Path(args.out)
    verifier, _ = load_model(args.verifier)
    train_set = shards(teacher, ("train", "train-documents"))
    train_set += [r for r in shards(teacher, ("train-tools",)) if r.kind == "tool_call"]  # as run.py's default
    dev_set = shards(teacher, DEV)
    spec = StudentSpec(trunk=args.trunk, top=tuple(args.top), rank=args.rank,
                       extra={"verifier": args.verifier, "teacher": str(teacher), "experiment": "train_shape.py"})
    config = TrainConfig(epochs=args.epochs, lr=args.lr)
    history = train(verifier, spec, train_set, dev_set, out, config)
    student = assemble_student(verifier, out)
    assembled_dev, by_kind = evaluate_by_kind(student, dev_set)
    (out / "report.json").write_text(json.dumps({
        "spec": asdict(spec), "train_config": asdict(config), "train_records": len(train_set),
        "dev_records": len(dev_set), "train_seconds": history["train_seconds"], "dev": history["dev"],
        "assembled_dev": assembled_dev, "dev_by_kind": by_kind, "date": time.strftime("%Y-%m-%d")}, indent=2) + "\n")
    print(json.dumps({"dev": history["dev"], "by_kind": by_kind}, indent=1))


if __name__ == "__main__":
    main()
