"""`asymspec bench bfcl`: tool calling on the Berkeley Function Calling Leaderboard's own items and AST checker.

Data and checker come from the `bfcl-eval` package (`pip install --no-deps bfcl-eval`: the checker needs only the
standard library; the package's own dependencies are every vendor's SDK). Each item's functions are bound as tools
the way BFCL binds them for OpenAI-style function calling (its types mapped to JSON schema, "." in names written
"_"), its question is the conversation, and the reply is decoded under the product's tool grammar with
`tool_choice` "auto" (the model decides) or "required" (forced: a call must come).

Scored as BFCL scores them:
- simple_python, multiple, parallel: BFCL's `ast_checker` on the reply's calls (a reply with no call is wrong);
- irrelevance, live_irrelevance: right when the reply calls nothing (no function fits the question);
- live_relevance: right when the reply makes at least one call.
Reported per system × tool choice × category: accuracy with its 95% Wilson interval, call rate (replies with at least
one call), seconds per item. Items are the first `--items` of each category, or all with `--items 0`.
Nothing in this project trains or tunes on these items.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from ..models import AUTO
from ..plotting import pyplot
from .common import RESULTS, markdown_table, terminal_table, wilson, write_json, write_report

CATEGORIES = ("simple_python", "multiple", "parallel", "irrelevance", "live_relevance", "live_irrelevance")
AST_CATEGORIES = ("simple_python", "multiple", "parallel")
CHECKER_MODEL = "asymspec"  # the model name the checker is told; its only use: "." in names arrives as "_"
# system name -> the engine's mode: the verifier alone on everything, alone on the compressed view, or the pair
SYSTEMS = {"ceiling": "full", "floor": "compressed", "asymspec": "asymmetric"}
CHOICES = ("auto", "required")
MAX_NEW_TOKENS = 128  # per reply: a call with its arguments, or a short answer


@dataclass
class Item:
    id: str
    category: str
    messages: list[dict]
    functions: list[dict]  # BFCL's own function documents
    answer: list | None  # BFCL's possible answers (AST categories only)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec bench bfcl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--categories", nargs="+", default=list(CATEGORIES), choices=CATEGORIES, metavar="CATEGORY",
                        help=f"BFCL categories (default: all of {', '.join(CATEGORIES)})")
    parser.add_argument("--systems", nargs="+", default=["ceiling", "asymspec"], choices=list(SYSTEMS),
                        help="ceiling: the verifier alone on everything; floor: alone on the compressed view; "
                             "asymspec: the pair (default: ceiling asymspec)")
    parser.add_argument("--verifiers", nargs="+", default=["bundled", "bundled-agent"],
                        help="each system runs with each of these verifiers, side by side (default: the raw bundled "
                             "model and bundled-agent, the one tuned to act as an agent)")
    parser.add_argument("--drafter", default=AUTO, help="asymspec's drafter (default: auto, the drafter distilled from "
                             "each bundled verifier)")
    parser.add_argument("--choices", nargs="+", default=list(CHOICES), choices=CHOICES,
                        help="tool_choice values: auto (the model decides) and required (forced)")
    parser.add_argument("--items", type=int, default=40, help="first items of each category (0: all; default 40)")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--out", default=str(RESULTS / "bfcl"),
                        help=f"writes OUT.md, OUT.json and OUT.png (default {RESULTS / 'bfcl'})")
    args = parser.parse_args(argv)

    from ..engine import AsymSpecEngine

    items = {category: load_items(category, args.items or None) for category in args.categories}
    out = Path(args.out)
    rows = []
    for verifier in args.verifiers:
        engine = AsymSpecEngine.from_pretrained(verifier, args.drafter if "asymspec" in args.systems else None)
        for system in args.systems:
            for choice in args.choices:
                for category, chosen in items.items():
                    runs = run(engine, chosen, mode=SYSTEMS[system], tool_choice=choice,
                               max_new_tokens=args.max_new_tokens, desc=f"{verifier} {system} {choice} {category}")
                    rows.append({"verifier": verifier, "system": system, "choice": choice, "category": category,
                                 **summarize(runs), "runs": runs})
                    # after every cell: a long run that is stopped keeps what it measured
                    write_json(out.with_suffix(".json"), {"settings": vars(args), "rows": rows})
    report = {"settings": vars(args), "rows": rows}
    write_report(out.with_suffix(".md"), render(report), lambda: plot(report, out.with_suffix(".png")))
    print(render(report, terminal=True))
    return 0


def data_dir() -> Path:
    """bfcl-eval's data folder, found without importing the package."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("asymspec bench bfcl needs BFCL's data and checker: `pip install --no-deps bfcl-eval` "
                         "(`make install` does it).")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def load_items(category: str, count: int | None = None) -> list[Item]:
    """The first `count` items of a category (all when None), with their possible answers where it has any."""
    folder = data_dir()
    records = [json.loads(line) for line in (folder / f"BFCL_v4_{category}.json").read_text().splitlines() if line]
    answers = {}
    answer_file = folder / "possible_answer" / f"BFCL_v4_{category}.json"
    if answer_file.is_file():
        answers = {a["id"]: a["ground_truth"] for a in map(json.loads, answer_file.read_text().splitlines()) if a}
    records = records[:count] if count else records
    return [Item(r["id"], category, r["question"][0], r["function"], answers.get(r["id"])) for r in records]


def tools_of(functions: list[dict]) -> list[dict]:
    """BFCL's function documents as JSON-schema tools, as its OpenAI-style handlers bind them."""
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

    def schema(node: dict) -> dict:
        out = {k: v for k, v in node.items() if k not in ("type", "properties", "items", "required", "optional")}
        out["type"] = GORILLA_TO_OPENAPI.get(node.get("type", "string"), "string")
        if "properties" in node:
            out["properties"] = {name: schema(sub) for name, sub in node["properties"].items()}
            if node.get("required"):
                out["required"] = [name for name in node["required"] if name in node["properties"]]
        if "items" in node and out["type"] == "array":
            out["items"] = schema(node["items"])
        return out

    tools = []
    for function in functions:
        parameters = schema({**function.get("parameters", {}), "type": "dict"})
        tools.append({"type": "function", "function": {"name": function["name"].replace(".", "_"),
                                                       "description": function.get("description", ""),
                                                       "parameters": parameters}})
    return tools


def checker():
    """BFCL's `ast_checker`. Its module imports `MODEL_CONFIG_MAPPING` from a module that imports every vendor SDK,
    only to ask whether a model writes "." in names as "_"; a stand-in module answers that for CHECKER_MODEL."""
    name = "bfcl_eval.constants.model_config"
    if name not in sys.modules:
        stand_in = types.ModuleType(name)
        stand_in.MODEL_CONFIG_MAPPING = {CHECKER_MODEL: types.SimpleNamespace(underscore_to_dot=True)}
        sys.modules[name] = stand_in
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    return lambda item, calls: ast_checker(item.functions, calls, item.answer, Language.PYTHON, item.category,
                                           CHECKER_MODEL)


def score(item: Item, calls: list[dict]) -> tuple[bool, str]:
    """(right, why) for a reply's calls `[{name: {argument: value}}]`, as BFCL scores the item's category."""
    if item.category in AST_CATEGORIES:
        if not calls:
            return False, "no call"
        result = checker()(item, calls)
        return bool(result["valid"]), "" if result["valid"] else str(result.get("error_type", result.get("error")))
    if item.category.endswith("irrelevance"):
        return not calls, "" if not calls else "called a tool"
    return bool(calls), "" if calls else "no call"  # live_relevance


def run(engine, items: list[Item], *, mode: str, tool_choice: str, max_new_tokens: int = MAX_NEW_TOKENS,
        desc: str = "bfcl") -> list[dict]:
    """Each item once, greedy: the reply's calls, whether they are right, seconds."""
    from ..chat import AsymSpecChat
    from ..engine import GenerationConfig

    chat = AsymSpecChat(engine, config=GenerationConfig(mode=mode, max_new_tokens=max_new_tokens))
    runs = []
    for item in tqdm(items, desc=desc, unit="item", leave=False):
        started = time.perf_counter()
        reply = chat.reply(item.messages, tools=tools_of(item.functions), tool_choice=tool_choice,
                           parallel_tool_calls=item.category == "parallel")
        seconds = time.perf_counter() - started
        calls = [{call.name: call.arguments} for call in reply.tool_calls]
        right, why = score(item, calls)
        runs.append({"id": item.id, "right": right, "why": why, "calls": calls, "text": reply.text[:200],
                     "invalid_calls": len(reply.invalid_tool_calls), "seconds": round(seconds, 3)})
        engine.reset()  # items share nothing: keep the cache pool from holding every item
    return runs


def summarize(runs: list[dict]) -> dict:
    n = len(runs)
    right = sum(r["right"] for r in runs)
    seconds = sorted(r["seconds"] for r in runs)
    return {"items": n, "right": right, "accuracy": right / n if n else float("nan"), "interval": wilson(right, n),
            "call_rate": sum(bool(r["calls"]) for r in runs) / n if n else float("nan"),
            "seconds_per_item": seconds[n // 2] if n else float("nan")}


def render(report: dict, terminal: bool = False) -> str:
    settings = report["settings"]
    header = ["verifier", "system", "choice", "category", "n", "right", "95% CI", "calls", "s/item"]
    rows = [[r["verifier"], r["system"], r["choice"], r["category"], r["items"], f"{r['accuracy']:.2f}",
             "{:.2f}–{:.2f}".format(*r["interval"]) if r["interval"] else "", f"{r['call_rate']:.2f}",
             f"{r['seconds_per_item']:.1f}"] for r in report["rows"]]
    if terminal:  # fits 80 columns
        return terminal_table(header, rows, left=4)
    return (f"# BFCL (bfcl-eval's data and AST checker)\n\nCommand: `asymspec bench bfcl {' '.join(_args(settings))}`"
            f". Systems: ceiling = the verifier alone on everything, floor = alone on the compressed view, asymspec = "
            f"the verifier with {settings['drafter']} drafting ('auto': its matched drafter). right: BFCL's AST check "
            "(simple_python, multiple, parallel), no call (irrelevance), any call (live_relevance), with its 95% "
            "Wilson interval; calls: share of replies with at least one tool call; s/item: median.\n\n"
            + markdown_table(header, rows))


def _args(settings: dict) -> list[str]:
    """The options that reproduce a report (the drafter and the token limit where they are not the defaults)."""
    args = [f"--items {settings['items']}", "--verifiers " + " ".join(settings["verifiers"]),
            "--systems " + " ".join(settings["systems"]), "--choices " + " ".join(settings["choices"]),
            "--categories " + " ".join(settings["categories"])]
    if settings["drafter"] != AUTO:
        args.append(f"--drafter {settings['drafter']}")
    if settings["max_new_tokens"] != MAX_NEW_TOKENS:
        args.append(f"--max-new-tokens {settings['max_new_tokens']}")
    return args


def plot(report: dict, path: Path) -> None:
    plt = pyplot()
    rows = report["rows"]
    labels = list(dict.fromkeys(r["category"] for r in rows))
    series = list(dict.fromkeys((r["verifier"], r["system"], r["choice"]) for r in rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(labels)), 4))
    width = 0.8 / max(len(series), 1)
    for s, key in enumerate(series):
        for c, category in enumerate(labels):
            row = next((r for r in rows if (r["verifier"], r["system"], r["choice"], r["category"]) == (*key, category)),
                       None)
            if row is None:
                continue
            low, high = row["interval"]
            ax.bar(c + s * width, row["accuracy"], width, color=f"C{s}", label=", ".join(key) if c == 0 else None,
                   yerr=[[row["accuracy"] - low], [high - row["accuracy"]]], capsize=2)
    ax.set_xticks([c + width * (len(series) - 1) / 2 for c in range(len(labels))], labels, rotation=20)
    ax.set_ylabel("right (95% CI)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7)
    ax.set_title("BFCL: AST accuracy / no call on irrelevance")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
