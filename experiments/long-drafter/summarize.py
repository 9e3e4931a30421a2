"""Per-drafter summary of niah_subset.py runs: accuracy, gap closed (against one run's Floor and Ceiling), FLOPs and
time against the Ceiling, by needle kind and length; and a plot of gap closed against total FLOPs.

    python experiments/long-drafter/summarize.py BASE_RUN [OTHER_RUN ...] --out FOLDER
BASE_RUN holds the Floor and Ceiling; every run holds "ratio β=1" and "student alone" for its drafter."""

import argparse
import json
from pathlib import Path


NAMES = {"runs/reader-v1": "bundled-agent-small-long"}


def load(folder):
    """(label, records): the drafter, and its retrieval view and copy head where the run used them."""
    data = json.loads((Path(folder) / "results.json").read_text())
    label = NAMES.get(data["drafter"], data["drafter"])
    if data.get("drafter_budget"):
        label += f", retrieval {data['drafter_budget']}"
    if data.get("copy_weight"):
        label += f", copy {data['copy_weight']:g}"
    return label, data["records"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--out", required=True)
    parser.add_argument("--floor", help="a run holding the Floor at another compression (the Ceiling stays BASE_RUN's)")
    args = parser.parse_args()
    _, base = load(args.runs[0])
    reference = {(r["system"], r["item"]): r for r in base if r["system"] in ("floor", "ceiling")}
    if args.floor:
        reference.update({(r["system"], r["item"]): r for r in load(args.floor)[1] if r["system"] == "floor"})
    items = sorted({r["item"] for r in base})
    rows, points = [], []
    lengths = sorted({r["length"] for r in base})
    for folder in args.runs:
        drafter, records = load(folder)
        mine = {(r["system"], r["item"]): r for r in records}
        for kind, needles in (("strict", {"code", "name", "password"}), ("classic", {"sandwich"})):
            for span, allowed in [("all", set(lengths)), *((f"{n // 1000}k", {n}) for n in lengths)]:
                chosen = [i for i in items if i.split("-")[0] in needles and int(i.split("-")[1]) in allowed]
                if not chosen:
                    continue
                floor = sum(reference[("floor", i)]["correct"] for i in chosen)
                ceiling = sum(reference[("ceiling", i)]["correct"] for i in chosen)
                ceiling_flops = sum(reference[("ceiling", i)]["verifier_flops"] for i in chosen)
                ceiling_seconds = sum(reference[("ceiling", i)]["seconds"] for i in chosen)
                for system in ("ratio β=1", "student alone"):
                    if any((system, i) not in mine for i in chosen):
                        continue  # a run of the pair only (the drafter alone is another run's)
                    got = [mine[(system, i)] for i in chosen]
                    found = sum(r["correct"] for r in got)
                    gap = (found - floor) / (ceiling - floor) if ceiling > floor else float("nan")
                    flops = sum(r["verifier_flops"] + r["drafter_flops"] for r in got) / ceiling_flops
                    seconds = sum(r["seconds"] for r in got) / ceiling_seconds
                    rows.append([drafter, kind, span, system, f"{found}/{len(got)}", f"{floor}/{ceiling}",
                                 f"{gap:.2f}", f"{flops:.2f}", f"{seconds:.2f}"])
                    if span == "all" and kind == "strict" and system == "ratio β=1":
                        points.append((drafter, flops, gap))
    header = ["drafter", "needles", "lengths", "system", "found", "Floor/Ceiling", "gap closed", "FLOPs x Ceiling",
              "time x Ceiling"]
    table = "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                      + ["| " + " | ".join(row) + " |" for row in rows])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.md").write_text(table + "\n")
    print(table)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    strict = [i for i in items if i.split("-")[0] != "sandwich"]
    floor_flops = (sum(reference[("floor", i)]["verifier_flops"] for i in strict)
                   / sum(reference[("ceiling", i)]["verifier_flops"] for i in strict))
    ax.scatter([floor_flops], [0.0], marker="s", color="grey")
    ax.annotate("Floor", (floor_flops, 0.0), fontsize=7)
    ax.scatter([1.0], [1.0], marker="s", color="black")
    ax.annotate("Ceiling", (1.0, 1.0), fontsize=7)
    for drafter, flops, gap in points:
        ax.scatter([flops], [gap])
        ax.annotate(drafter, (flops, gap), fontsize=7)
    ax.axhline(0.8, color="green", lw=0.6, ls="--")
    ax.axvline(0.5, color="green", lw=0.6, ls="--")
    ax.set_xlabel("total FLOPs (verifier + drafter) x Ceiling")
    ax.set_ylabel("gap closed, strict needles, head/tail 4x")
    ax.set_xlim(-0.05, 1.1)
    ax.set_ylim(-0.2, max([1.1] + [gap + 0.1 for _, _, gap in points]))
    ax.set_title("NIAH (subset): gap closed against FLOPs per drafter", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "gap-vs-flops.png", dpi=120)


if __name__ == "__main__":
    main()
