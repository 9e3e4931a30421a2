"""A reduced NIAH grid to compare drafters quickly: lengths 1k-7k, three depths, all four needles, head/tail 4x;
systems Floor, Ceiling, AsymSpec (ratio rule, β=1, bonus fused: the default pair's rule) and the drafter alone.

    python experiments/long-drafter/niah_subset.py DRAFTER OUT [--lengths ...] [--systems asymspec alone]
        [--drafter-budget TOKENS] [--copy-weight λ] [--settings head_tail:8]

Writes OUT/results.json (records as `asymspec bench niah` writes them) and prints a per-length table."""

import argparse
import json
import time
from dataclasses import replace
from collections import defaultdict
from pathlib import Path

from asymspec_agents.bench import niah
from asymspec_agents.bench.accuracy import STUDENT_ALONE, System
from asymspec_agents.engine import AsymSpecEngine

FLOOR = System("floor", (("mode", "compressed"),))
CEILING = System("ceiling", (("mode", "full"),))
ASYMSPEC = System("ratio β=1", (("mode", "asymmetric"), ("acceptance", "ratio"), ("beta", 1.0), ("cda", True),
                                ("fuse_bonus", True)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("drafter")
    parser.add_argument("out")
    parser.add_argument("--verifier", default="bundled-agent")
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 3000, 5000, 7000])
    parser.add_argument("--depths", type=int, nargs="+", default=[17, 50, 83])
    parser.add_argument("--settings", nargs="+", default=["head_tail:4"])
    parser.add_argument("--systems", nargs="+", default=["floor", "ceiling", "asymspec", "alone"],
                        choices=["floor", "ceiling", "asymspec", "alone"])
    parser.add_argument("--drafter-budget", type=int, help="the drafter's retrieval view (default: whole documents)")
    parser.add_argument("--copy-weight", type=float, help="the drafter's copy head (default: the rule's)")
    args = parser.parse_args()
    copy = () if args.copy_weight is None else (("copy_weight", args.copy_weight),)
    asymspec = replace(ASYMSPEC, settings=(*ASYMSPEC.settings, *copy))
    named = {"floor": FLOOR, "ceiling": CEILING, "asymspec": asymspec, "alone": STUDENT_ALONE}
    systems = [named[name] for name in args.systems]
    grid = niah.Grid(lengths=tuple(args.lengths), depths=tuple(args.depths), systems=systems,
                     settings=tuple((c, int(r)) for c, _, r in (s.partition(":") for s in args.settings)),
                     drafter_budget=args.drafter_budget)
    engine = AsymSpecEngine.shared(args.verifier, args.drafter)
    started = time.time()
    records = niah.run_grid(engine, grid)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"drafter": args.drafter, "verifier": args.verifier,
                                                  "drafter_budget": args.drafter_budget,
                                                  "copy_weight": args.copy_weight,
                                                  "hours": (time.time() - started) / 3600, "records": records}))
    table(records)


def table(records):
    cells = defaultdict(list)
    for r in records:
        kind = "classic" if r["needle"] == "sandwich" else "strict"
        cells[(r["system"], kind, r["length"])].append(r)
    for (system, kind, length), found in sorted(cells.items()):
        flops = sum(r["verifier_flops"] + r["drafter_flops"] for r in found)
        print(f"{system:14} {kind:8} {length:5} {sum(r['correct'] for r in found)}/{len(found)}  "
              f"GFLOPs {flops / len(found) / 1e9:7.1f}  s {sum(r['seconds'] for r in found) / len(found):5.1f}")


if __name__ == "__main__":
    main()
