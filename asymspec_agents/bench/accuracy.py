"""`asymspec bench {accuracy,cost,scaling,all}`: accuracy recovered, what it costs, and multi-turn scaling.

Accuracy: each task's items run through every system (Floor = `compressed`, Ceiling = `full`, `symmetric`,
AsymSpec over β with the gate on and off) under each compression setting. Reported on the test split:
accuracy, gap closed = (system − Floor) / (Ceiling − Floor) with paired bootstrap intervals, and the β chosen
on the dev split. Cost (same runs): wall time per item, tokens per stream, verifier and drafter FLOPs and the
verifier's FLOPs relative to the Ceiling. Scaling: a scripted 12-step agent conversation, per-step latency with
cache reuse, without it, and plain transformers `generate` re-reading the whole history.

With the bundled pair the drafter *is* the verifier, so AsymSpec with β = 1 equals the Ceiling by construction
(t + log p(full) − log p(comp) = log p(full) when t = log p(comp)); the table says so next to the numbers.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from ..plotting import pyplot
from .common import RESULTS, markdown_table, median, pydoc_text, wilson, write_json, write_report
from .tasks import TASKS, Item, build

# name -> (verifier, drafter) for AsymSpecEngine.shared
PAIRS = {"bundled": ("bundled", "bundled"),
         "bundled-agent": ("bundled-agent", "bundled-agent-small"),  # the default pair: the tuned model, its drafter
         "bundled-small": ("bundled", "bundled-small"),  # SmolLM2-135M verifying for its distilled 6-layer student
         "bundled-int8": ("bundled", "bundled-int8"),  # ... for an int8 copy of itself (same FLOPs, less time)
         "bundled-hetero": ("bundled-hetero", None)}  # Gemma-3-270M verifier, SmolLM2-135M drafter (bridged)
MAX_NEW_TOKENS = 32  # the bundled model restates the question before answering
TOOL_TOKENS = 48  # a whole call: <tool_call>{"name": …, "arguments": {…}}</tool_call>


@dataclass(frozen=True)
class System:
    name: str
    settings: tuple  # GenerationConfig overrides as (key, value) pairs
    alone: bool = False  # the drafter decoding alone on the full view (the pair's verifier is not used)

    @property
    def overrides(self) -> dict:
        return dict(self.settings)


RULES = ("ratio", "fused")  # the published acceptance rule (with its defaults) and ours


def systems(betas, gates, rules=RULES) -> list[System]:
    """Floor, Ceiling, symmetric, and AsymSpec under each rule (with that rule's defaults) over β and the gate."""
    found = [System("floor", (("mode", "compressed"),)), System("ceiling", (("mode", "full"),)),
             System("symmetric", (("mode", "symmetric"),))]
    for rule in rules:
        for gate in gates:
            for beta in betas:
                found.append(System(f"{rule} β={beta:g}{'' if gate else ' no-gate'}",
                                    (("mode", "asymmetric"), ("acceptance", rule), ("beta", beta), ("cda", gate))))
    return found


STUDENT_ALONE = System("student alone", (("mode", "full"),), alone=True)


def plan(quick: bool, pair: str = "bundled") -> dict:
    """Tasks, compression settings per task, systems and item counts of a run."""
    if pair in ("bundled-agent", "bundled-small", "bundled-int8"):
        # a cheaper drafter's operating point: both rules at the paper's β
        ratios = [4] if quick else [2, 4, 8]
        head_tail = [("head_tail", r) for r in ratios]
        return {"items": 8 if quick else 50,
                "settings": {"needle": head_tail + [("bm25", 4)], "needle2": [("head_tail", 4)],
                             "retention": head_tail, "tools": [("signatures", None)],
                             "tool_output": [("head_tail", 4)], "needle_long": [("head_tail", 4)]},
                "systems": systems([1.0], [True]) + [STUDENT_ALONE], "timing": "cold"}
    if pair == "bundled-hetero":  # a verifier twice the drafter's cost per token: a smaller grid
        return {"items": 16 if quick else 40,
                "settings": {"needle": [("head_tail", 4)], "retention": [("head_tail", 4)]},
                "systems": systems([0.5, 1.0, 2.0], [True])}
    if quick:
        return {"items": 8, "settings": {"needle": [("head_tail", 4), ("bm25", 4)], "tools": [("signatures", None)],
                                         "retention": [("head_tail", 4)]},
                "systems": systems([0.0, 1.0, 2.0], [True])}  # the gate on/off comparison is in the full run
    ratios = [2, 4, 8]
    compressors = ["head_tail", "bm25", "surprisal"]
    return {"items": 50, "settings": {"needle": [(c, r) for c in compressors for r in ratios],
                                      "needle2": [(c, r) for c in compressors for r in ratios],
                                      "tools": [("signatures", None)],
                                      "retention": [(c, r) for c in compressors for r in ratios]},
            "systems": systems([0.0, 0.5, 1.0, 1.5, 2.0], [True, False])}


def narrow(run_plan: dict, *, tasks=None, compressors=None, ratios=None, betas=None, gate=None, rules=None) -> dict:
    """A plan cut down to the given tasks, compressors, ratios, β values and gate setting (None keeps all).
    Settings without a ratio (tool schemas shown as signatures) are not filtered by compressor or ratio."""
    def kept_setting(compressor, ratio) -> bool:
        return ratio is None or ((not compressors or compressor in compressors) and (not ratios or ratio in ratios))

    def kept_system(system: System) -> bool:
        found = system.overrides
        if found.get("mode") != "asymmetric":
            return True
        return ((not betas or found["beta"] in betas) and (not rules or found["acceptance"] in rules)
                and (gate in (None, "both") or found["cda"] == (gate == "on")))

    settings = {task: [s for s in found if kept_setting(*s)] for task, found in run_plan["settings"].items()
                if not tasks or task in tasks}
    return {**run_plan, "settings": {task: found for task, found in settings.items() if found},
            "systems": [system for system in run_plan["systems"] if kept_system(system)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec bench", description=__doc__)
    parser.add_argument("what", nargs="?", default="all", choices=["accuracy", "cost", "scaling", "all"])
    parser.add_argument("--quick", action="store_true", help="a reduced grid that finishes in minutes")
    parser.add_argument("--pair", default="bundled", choices=sorted(PAIRS))
    parser.add_argument("--verifier", help="another verifier in the pair's place (e.g. a folder `asymspec "
                        "train-agent` wrote), measured on the pair's plan")
    parser.add_argument("--drafter", help="another drafter for the pair's verifier (e.g. a folder `asymspec "
                        "distill-drafter` wrote), measured on the pair's plan")
    parser.add_argument("--items", type=int, help="items per task (default: 8 quick, 50 full)")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, metavar="TASK", help=f"subset of {', '.join(TASKS)}")
    parser.add_argument("--compressors", nargs="+", help="subset of head_tail, bm25, surprisal (tools keep signatures)")
    parser.add_argument("--ratios", type=int, nargs="+", help="subset of the compression ratios")
    parser.add_argument("--betas", type=float, nargs="+", help="subset of the β values of the AsymSpec systems")
    parser.add_argument("--gate", choices=["on", "off", "both"], help="keep AsymSpec systems with the gate on/off")
    parser.add_argument("--rules", nargs="+", choices=RULES, help="keep AsymSpec systems with these acceptance rules")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "accuracy"),
                        help=f"output folder (default {RESULTS / 'accuracy'})")
    parser.add_argument("--merge", nargs="+", metavar="DIR", help="write one result from the results.json of parts "
                        "of a grid run in separate processes (no model runs)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge:
        results = merge_parts([json.loads((Path(d) / "results.json").read_text()) for d in args.merge])
        write_results(results, out)
        return 0
    from ..engine import AsymSpecEngine

    verifier, drafter = PAIRS[args.pair]
    engine = AsymSpecEngine.shared(args.verifier or verifier, args.drafter or drafter)
    swapped = {role: getattr(args, role) for role in ("verifier", "drafter") if getattr(args, role)}
    results = {"pair": args.pair, **swapped, "quick": args.quick, "seed": args.seed, "date": time.strftime("%Y-%m-%d"),
               "machine": _machine()}
    if args.what in ("accuracy", "cost", "all"):
        grid = plan(args.quick, args.pair)
        run_plan = narrow(grid, tasks=args.tasks, compressors=args.compressors, ratios=args.ratios,
                          betas=args.betas, gate=args.gate, rules=args.rules)
        if args.items:
            run_plan["items"] = args.items
        if run_plan != grid:
            results["run"] = f"part of the {'quick' if args.quick else 'full'} grid"
        results["plan"] = {"items": run_plan["items"], "settings": run_plan["settings"],
                           "systems": [system.name for system in run_plan["systems"]],
                           "timing": run_plan.get("timing", "warm")}
        records = run_accuracy(engine, run_plan, args.seed)
        results["accuracy"] = summarize(records, results["plan"]["systems"])
        results["records"] = records
    if args.what in ("scaling", "all"):
        results["scaling"] = run_scaling(engine, steps=12)
    write_results(results, out)
    return 0


def write_results(results: dict, out: Path) -> None:
    write_json(out / "results.json", results)
    write_report(out / "results.md", render_markdown(results), lambda: plot_all(results, out))
    print((out / "results.md").read_text())


def merge_parts(parts: list[dict]) -> dict:
    """One result from parts of one grid run made in separate processes (to use more cores): their records
    joined and summarized again. The parts must share pair, seed, items, systems and timing, and no setting may
    be in two parts; the first part's scaling run, if any, is kept."""
    first = parts[0]
    same = ("pair", "seed", "quick", "verifier", "drafter")
    same_plan = ("items", "systems", "timing")
    for part in parts[1:]:
        for key in same:
            if part.get(key) != first.get(key):
                raise ValueError(f"cannot merge runs with different {key}: {first.get(key)!r} and {part.get(key)!r}")
        for key in same_plan:
            if part["plan"].get(key) != first["plan"].get(key):
                raise ValueError(f"cannot merge runs with different plan {key}: {first['plan'].get(key)!r} and "
                                 f"{part['plan'].get(key)!r}")
    settings: dict[str, list] = {}
    for part in parts:
        for task, found in part["plan"]["settings"].items():
            for setting in found:
                if setting in settings.get(task, []):
                    raise ValueError(f"the setting {task} {setting} is in two parts: merge each setting once")
                settings.setdefault(task, []).append(setting)
    records = [r for part in parts for r in part["records"]]
    grid = plan(first["quick"], first["pair"])
    whole = {task: [list(s) for s in found] for task, found in grid["settings"].items()}
    merged = {key: first[key] for key in (*same, "machine") if key in first}
    merged.update(date=max(part["date"] for part in parts),
                  plan={**first["plan"], "settings": settings}, accuracy=summarize(records, first["plan"]["systems"]),
                  records=records, parts=sum(part.get("parts", 1) for part in parts))  # a merged part counts its own
    if _as_sets(settings) != _as_sets(whole) or first["plan"]["items"] != grid["items"]:
        merged["run"] = f"part of the {'quick' if first['quick'] else 'full'} grid"
    scaling = next((part["scaling"] for part in parts if "scaling" in part), None)
    if scaling:
        merged["scaling"] = scaling
    return merged


def _as_sets(settings: dict) -> dict:
    """Settings per task whatever the order the parts listed them in."""
    return {task: {tuple(s) for s in found} for task, found in settings.items()}


# -- accuracy and cost ---------------------------------------------------------------------------------------

def run_accuracy(engine, run_plan: dict, seed: int) -> list[dict]:
    from ..chat import AsymSpecChat
    from ..engine import AsymSpecEngine, GenerationConfig

    records = []
    jobs = [(task, setting) for task, settings in run_plan["settings"].items() for setting in settings]
    bar = tqdm(total=len(jobs) * run_plan["items"] * len(run_plan["systems"]), desc="accuracy", unit="reply")
    for task, (compressor, ratio) in jobs:
        items = build(task, run_plan["items"], seed)
        chat = AsymSpecChat(engine, policy=policy_for(task, compressor, ratio, engine.tokenizer, items),
                            config=GenerationConfig())
        # the drafter decoding alone reads the same full views (one memory for both)
        alone = (AsymSpecChat(AsymSpecEngine(engine.drafter, None, engine.tokenizer), context=chat.context)
                 if any(s.alone for s in run_plan["systems"]) else None)
        for item in items:
            for system in run_plan["systems"]:
                records.append(run_item(alone if system.alone else chat, item, system, compressor, ratio,
                                        cold=run_plan.get("timing") == "cold"))
                bar.update()
    bar.close()
    return records


def run_item(chat, item: Item, system: System, compressor: str, ratio, cold: bool = False) -> dict:
    """One reply, timed on warm caches (the prompt was prefilled before: what an agent with cache reuse pays for
    its next turn) or, with `cold`, from empty caches (what reading a new long document costs); FLOPs count the
    prefill either way, as a fresh call would spend it."""
    request = dict(tools=item.tools or None, tool_choice="required" if item.tools else None, parallel_tool_calls=False,
                   query=item.query)
    views = chat.context.render(item.messages, tools=request["tools"], query=item.query)
    if cold:
        chat.engine.reset()
    else:
        chat.engine.prefill(views.full_ids, views.comp_ids)
    start = time.perf_counter()
    reply = chat.reply(item.messages, **request, **system.overrides,
                       max_new_tokens=TOOL_TOKENS if item.tools else MAX_NEW_TOKENS)
    stats = reply.stats
    return {"task": item.task, "item": item.id, "split": item.split, "compressor": compressor, "ratio": ratio,
            "system": system.name, "correct": item.correct(reply), "seconds": time.perf_counter() - start,
            "acceptance": stats.acceptance_rate if stats.drafted else None,
            "verifier_flops": stats.flops("verifier", fresh=True), "drafter_flops": stats.flops("drafter", fresh=True),
            "tokens": {name: s.prefill_tokens + s.reused_tokens + s.decode_tokens for name, s in stats.streams.items()},
            "full_tokens": reply.usage.full_input_tokens, "comp_tokens": reply.usage.input_tokens,
            "answer": item.answer, "reply": reply.text[:200] if not reply.tool_calls else reply.tool_calls[0].name}


def policy_for(task: str, compressor: str, ratio, tokenizer, items: list[Item]):
    """Budgets that compress the task's long items by `ratio` (measured on the items' own token counts)."""
    from ..context import CompressionPolicy, ToolResult

    if task == "tools":
        return CompressionPolicy()  # the compressed view shows signatures instead of full schemas
    if task.startswith("needle"):
        kind, texts = "passage", [m.passages[0].text for i in items for m in i.messages if getattr(m, "passages", None)]
    elif task == "tool_output":
        kind, texts = "tool_result", [m.content for i in items for m in i.messages if isinstance(m, ToolResult)]
    else:
        kind, texts = "user", [i.messages[1].content for i in items]
    typical = statistics.median(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts)
    return CompressionPolicy(budgets={kind: max(16, int(typical / ratio))}, compressors={kind: compressor})


def summarize(records: list[dict], names: list[str], resamples: int = 1000) -> list[dict]:
    """Test-split accuracy, gap closed with paired bootstrap intervals, cost; plus β chosen on the dev split;
    one row per (setting, system name in `names`)."""
    rows = []
    groups = sorted({(r["task"], r["compressor"], r["ratio"] or 0) for r in records})
    for task, compressor, ratio in groups:
        group = [r for r in records if (r["task"], r["compressor"], r["ratio"] or 0) == (task, compressor, ratio)]
        by_system = {name: {r["item"]: r for r in group if r["system"] == name} for name in names}
        test_items = sorted({r["item"] for r in group if r["split"] == "test"})
        dev_items = sorted({r["item"] for r in group if r["split"] == "dev"})
        floor, ceiling = by_system["floor"], by_system["ceiling"]
        ceiling_flops = _mean([ceiling[i]["verifier_flops"] for i in test_items])
        ceiling_seconds = median([ceiling[i]["seconds"] for i in test_items])
        chosen = {max((name for name in names if _rule(name) == rule),
                      key=lambda name: (_accuracy(by_system[name], dev_items), -_beta(name)))
                  for rule in RULES if any(_rule(name) == rule for name in names)}
        for name in names:
            runs = by_system[name]
            low, high = _bootstrap_gap(runs, floor, ceiling, test_items, resamples)
            rows.append({
                "task": task, "compressor": compressor, "ratio": ratio or None, "system": name,
                "chosen_on_dev": name in chosen, "n_test": len(test_items),
                "accuracy": _accuracy(runs, test_items), "accuracy_ci": _wilson(runs, test_items),
                "gap_closed": _gap(runs, floor, ceiling, test_items),
                "gap_closed_ci": [low, high],
                "acceptance": _mean([runs[i]["acceptance"] for i in test_items if runs[i]["acceptance"] is not None]),
                "seconds_per_item": median([runs[i]["seconds"] for i in test_items]),
                "verifier_flops": _mean([runs[i]["verifier_flops"] for i in test_items]),
                "drafter_flops": _mean([runs[i]["drafter_flops"] for i in test_items]),
                "verifier_flops_vs_ceiling": _mean([runs[i]["verifier_flops"] for i in test_items]) / ceiling_flops,
                "total_flops_vs_ceiling": _mean([runs[i]["verifier_flops"] + runs[i]["drafter_flops"]
                                                 for i in test_items]) / ceiling_flops,
                "seconds_vs_ceiling": median([runs[i]["seconds"] for i in test_items]) / ceiling_seconds,
                "full_tokens": _mean([runs[i]["full_tokens"] for i in test_items]),
                "comp_tokens": _mean([runs[i]["comp_tokens"] for i in test_items]),
            })
    return rows


def _accuracy(runs: dict, items: list[str]) -> float:
    return sum(runs[i]["correct"] for i in items) / len(items) if items else float("nan")


def _wilson(runs: dict, items: list[str]) -> list[float] | None:
    """The 95% Wilson score interval of the accuracy over `items`."""
    return wilson(sum(runs[i]["correct"] for i in items), len(items))


def _gap(runs, floor, ceiling, items) -> float | None:
    span = _accuracy(ceiling, items) - _accuracy(floor, items)
    return None if span <= 0 else (_accuracy(runs, items) - _accuracy(floor, items)) / span


def _bootstrap_gap(runs, floor, ceiling, items, resamples: int) -> tuple[float | None, float | None]:
    rng = random.Random(0)
    values = []
    for _ in range(resamples):
        sample = [rng.choice(items) for _ in items]
        # resampled items keep their identity per system: a paired bootstrap
        gap = _gap(_resampled(runs, sample), _resampled(floor, sample), _resampled(ceiling, sample), list(range(len(sample))))
        if gap is not None:
            values.append(gap)
    if len(values) < resamples // 2:
        return None, None
    values.sort()
    return values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1]


def _resampled(runs: dict, sample: list[str]) -> dict:
    return {index: runs[item] for index, item in enumerate(sample)}


def _beta(name: str) -> float:
    return float(name.split("=")[1].split()[0])


def _rule(name: str) -> str | None:
    """The acceptance rule of an AsymSpec system's name ("ratio β=1"), None for the others."""
    rule = name.split(" ")[0]
    return rule if rule in RULES and "β=" in name else None


def _mean(values) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


# -- multi-turn agent scaling --------------------------------------------------------------------------------

def agent_script(tokenizer, steps: int = 12, target_tokens: int = 7900) -> list[list]:
    """Conversations after each step of a scripted agent: each step calls a documentation tool and gets a
    real-text result; the full history grows to about `target_tokens`."""
    from ..context import AssistantMessage, SystemMessage, ToolCall, ToolResult, UserMessage

    text = pydoc_text()
    per_step = target_tokens // steps
    ids = tokenizer(text[:400_000], add_special_tokens=False)["input_ids"]
    messages = [SystemMessage("You are a Python documentation assistant. Use the tools."),
                UserMessage("Explain how Python's import system, exceptions and context managers fit together.")]
    conversations = [list(messages)]
    for step in range(1, steps):
        chunk = tokenizer.decode(ids[step * per_step: (step + 1) * per_step - 40])
        call = ToolCall(f"call_{step}", "read_docs", {"topic": f"section {step}"})
        messages += [AssistantMessage("", tool_calls=[call]), ToolResult(call.id, "read_docs", chunk)]
        conversations.append(list(messages))
    return conversations


def run_scaling(engine, steps: int = 12, max_new_tokens: int = 16) -> dict:
    """Three passes over the same growing conversation, each system on its own so none warms another's cache."""
    import torch

    from ..chat import AsymSpecChat
    from ..context import ToolSpec, UserMessage
    from ..engine import GenerationConfig

    tools = [ToolSpec("read_docs", "Read a section of the Python reference documentation.",
                      {"type": "object", "properties": {"topic": {"type": "string"}}, "required": ["topic"]})]
    chat = AsymSpecChat(engine, config=GenerationConfig(max_new_tokens=max_new_tokens, mode="asymmetric"))
    conversations = agent_script(engine.tokenizer, steps)
    rows = [{"step": step} for step in range(1, len(conversations) + 1)]
    # One untimed reply first: the tool grammar is compiled once per process and first forwards pay one-off costs;
    # neither belongs to step 1 of one pass only.
    chat.reply([conversations[0][0], UserMessage("Which tool do you have?")], tools=tools)
    engine.reset()
    for row, messages in zip(rows, tqdm(conversations, desc="scaling: caches reused", unit="step")):
        start = time.perf_counter()
        reply = chat.reply(messages, tools=tools)
        row.update(reuse_seconds=time.perf_counter() - start, full_tokens=len(reply.views.full_ids),
                   comp_tokens=len(reply.views.comp_ids),
                   prefilled_tokens_with_reuse=sum(s.prefill_tokens for s in reply.stats.streams.values()),
                   # what the step computes: new tokens attend to an ever longer cache (the floor of its latency)
                   gflops_with_reuse=(reply.stats.flops("verifier") + reply.stats.flops("drafter")) / 1e9)
        row["full_ids"] = reply.views.full_ids
    for row, messages in zip(rows, tqdm(conversations, desc="scaling: fresh engine", unit="step")):
        engine.reset()  # nothing cached, as a fresh engine per step
        start = time.perf_counter()
        chat.reply(messages, tools=tools)
        row["fresh_seconds"] = time.perf_counter() - start
    for row in tqdm(rows, desc="scaling: transformers generate", unit="step"):
        full_ids = row.pop("full_ids")
        start = time.perf_counter()
        with torch.inference_mode():
            engine.verifier.generate(torch.tensor([full_ids]), attention_mask=torch.ones(1, len(full_ids), dtype=torch.long),
                                     max_new_tokens=max_new_tokens, do_sample=False,
                                     pad_token_id=engine.tokenizer.pad_token_id)
        row["hf_generate_seconds"] = time.perf_counter() - start
    return {"steps": rows, "step12_over_step1_with_reuse": rows[-1]["reuse_seconds"] / rows[0]["reuse_seconds"],
            # from step 2 on, every step adds one tool result of the same size
            "step12_over_step2_with_reuse": rows[-1]["reuse_seconds"] / rows[1]["reuse_seconds"],
            "step12_over_step1_flops_with_reuse": rows[-1]["gflops_with_reuse"] / rows[0]["gflops_with_reuse"]}


# -- output --------------------------------------------------------------------------------------------------

def render_markdown(results: dict) -> str:
    run = results.get("run", "quick run" if results["quick"] else "full run")
    swapped = "".join(f" with {role} `{results[role]}`" for role in ("verifier", "drafter") if results.get(role))
    lines = [f"# AsymSpec benchmark ({run}, pair `{results['pair']}`{swapped}, "
             f"{results['date']}, {results['machine']})\n"]
    if results["pair"] == "bundled-hetero":
        lines.append("\nA genuinely smaller drafter: SmolLM2-135M-Instruct (vocabulary 49152) drafts for Gemma-3-270M "
                     "base (vocabulary 262144) across the vocabulary bridge; Gemma reads the plain transcript format.\n")
    if results["pair"] == "bundled":
        lines.append("\nThe bundled pair uses one model as drafter and verifier: AsymSpec with β = 1 under the fused "
                     "rule equals the Ceiling by construction, so its gap closed measures the implementation, not the "
                     "idea; under the paper's ratio rule every third token of a fully accepted run is the verifier's "
                     "own compressed-view choice (its unfused bonus), so it can fall below the Ceiling.\n")
    lines.append("\n`ratio` systems decode with the paper's settings (γ = 0.5, K = 2, unfused bonus), `fused` with "
                 "ours (γ = 1, k_max 8 adaptive, fused bonus); the β chosen on the dev split is marked per rule.\n")
    if "plan" in results:
        run_plan = results["plan"]
        settings = "; ".join(f"{task}: " + ", ".join(c + (f" {r}×" if r else "") for c, r in found)
                             for task, found in run_plan["settings"].items())
        timing = ("from empty caches (the prompt's prefill is timed)" if run_plan.get("timing") == "cold"
                  else "on warm caches (the prompt was prefilled before; FLOPs still count it)")
        lines.append(f"\nPlan: {run_plan['items']} items per task ({settings}); systems: "
                     f"{', '.join(run_plan['systems'])}. Replies are timed {timing}.\n")
    if "accuracy" in results:
        header = ["task", "compression", "system", "accuracy (test) [95% CI]", "gap closed [95% CI]", "acceptance",
                  "s/item", "s × ceiling", "verifier FLOPs × ceiling", "total FLOPs × ceiling"]
        table = []
        for r in results["accuracy"]:
            gap = "— (no gap: floor ≥ ceiling)" if r["gap_closed"] is None else f"{r['gap_closed']:.2f}"
            if r["gap_closed"] is not None and r["gap_closed_ci"][0] is not None:
                gap += f" [{r['gap_closed_ci'][0]:.2f}, {r['gap_closed_ci'][1]:.2f}]"
            setting = r["compressor"] + (f" {r['ratio']}×" if r["ratio"] else "")
            name = r["system"] + (" (chosen on dev)" if r["chosen_on_dev"] else "")
            ci = f" [{r['accuracy_ci'][0]:.2f}, {r['accuracy_ci'][1]:.2f}]" if r.get("accuracy_ci") else ""
            table.append([r["task"], setting, name, f"{r['accuracy']:.2f}{ci} (n={r['n_test']})", gap,
                          "" if r["acceptance"] != r["acceptance"] else f"{r['acceptance']:.0%}",
                          f"{r['seconds_per_item']:.2f}", f"{r['seconds_vs_ceiling']:.2f}",
                          f"{r['verifier_flops_vs_ceiling']:.2f}", f"{r['total_flops_vs_ceiling']:.2f}"])
        lines.append("\n## Accuracy and cost\n\n" + markdown_table(header, table))
    if "scaling" in results:
        s = results["scaling"]
        table = [[r["step"], r["full_tokens"], r["comp_tokens"], f"{r['reuse_seconds']:.2f}", f"{r['fresh_seconds']:.2f}",
                  f"{r['hf_generate_seconds']:.2f}", r["prefilled_tokens_with_reuse"],
                  f"{r['gflops_with_reuse']:.0f}" if "gflops_with_reuse" in r else "—"] for r in s["steps"]]
        flops = s.get("step12_over_step1_flops_with_reuse")
        lines.append(f"\n## Multi-turn agent scaling (step 12 / step 1 with reuse: "
                     f"{s['step12_over_step1_with_reuse']:.2f}× in time"
                     + (f", {flops:.2f}× in FLOPs" if flops else "") + "; target ≤ 1.3×"
                     + (f"; step 12 / step 2: {s['step12_over_step2_with_reuse']:.2f}×"
                        if "step12_over_step2_with_reuse" in s else "") + ")\n\n" + markdown_table(
                         ["step", "full tokens", "compressed tokens", "with reuse s", "fresh engine s",
                          "transformers generate s", "tokens prefilled (reuse)", "GFLOPs (reuse)"], table))
    return "".join(lines)


def plot_all(results: dict, out: Path) -> None:
    plt = pyplot()

    if "accuracy" in results:
        rows = results["accuracy"]
        groups = sorted({(r["task"], r["compressor"], r["ratio"] or 0) for r in rows})
        fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups), 3.6), squeeze=False)
        for ax, group in zip(axes[0], groups):
            subset = [r for r in rows if (r["task"], r["compressor"], r["ratio"] or 0) == group]
            ax.bar(range(len(subset)), [r["accuracy"] for r in subset],
                   color=["#999" if r["system"] in ("floor", "ceiling") else "#4a7" if _rule(r["system"]) == "ratio"
                          else "#a74" if _rule(r["system"]) else "#57a" for r in subset])
            ax.set_xticks(range(len(subset)), [r["system"] for r in subset], rotation=70, fontsize=7)
            ax.set_title(f"{group[0]} · {group[1]}{f' {group[2]}×' if group[2] else ''}", fontsize=9)
            ax.set_ylim(0, 1)
        axes[0][0].set_ylabel("accuracy (test split)")
        fig.tight_layout()
        fig.savefig(out / "accuracy.png", dpi=110)
        plt.close(fig)

        _plot_gap_and_flops(plt, rows, groups, out / "gap_and_flops.png")
    if "scaling" in results:
        steps = results["scaling"]["steps"]
        fig, ax = plt.subplots(figsize=(6.5, 4))
        for key, label in (("reuse_seconds", "ChatAsymSpec core, caches reused"), ("fresh_seconds", "fresh engine per step"),
                           ("hf_generate_seconds", "transformers generate, whole history")):
            ax.plot([r["step"] for r in steps], [r[key] for r in steps], marker="o", label=label)
        ax.set_xlabel("agent step")
        ax.set_ylabel("seconds per step")
        ax.set_title("Latency as the agent's history grows")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "scaling.png", dpi=110)
        plt.close(fig)


def _plot_gap_and_flops(plt, rows: list[dict], groups: list[tuple], path: Path) -> None:
    """Each system's operating point in every cell (accuracy against total FLOPs relative to the Ceiling), and the
    gap closed against β where a run tried more than one β."""
    betas = {_beta(r["system"]) for r in rows if _rule(r["system"])}
    fig, axes = plt.subplots(1, 2 if len(betas) > 1 else 1, figsize=(11 if len(betas) > 1 else 6.5, 4), squeeze=False)
    points = axes[0][-1]
    kinds: dict[str, list[dict]] = {}  # one legend entry per kind of system, whatever its β
    for r in rows:
        kinds.setdefault(r["system"].split(" β=")[0] if _rule(r["system"]) else r["system"], []).append(r)
    for (kind, found), marker in zip(kinds.items(), "osD^vP*Xh<>"):
        points.scatter([r["total_flops_vs_ceiling"] for r in found], [r["accuracy"] for r in found], s=22,
                       marker=marker, label=kind, alpha=0.8)
    points.axvline(1.0, color="grey", linestyle="--", lw=0.8)
    points.set_xlabel("total FLOPs (drafter + verifier) × the Ceiling's")
    points.set_ylabel("accuracy (test)")
    points.set_title(f"Operating points in {len(groups)} task × compression cells")
    points.legend(fontsize=7)
    if len(betas) > 1:
        left = axes[0][0]
        for group in groups:
            for rule, style in zip(RULES, ("-", ":")):
                subset = [r for r in rows if (r["task"], r["compressor"], r["ratio"] or 0) == group
                          and _rule(r["system"]) == rule and "no-gate" not in r["system"] and r["gap_closed"] is not None]
                if subset:
                    ratio = f" {group[2]}×" if group[2] else ""
                    left.plot([_beta(r["system"]) for r in subset], [r["gap_closed"] for r in subset], marker="o",
                              linestyle=style, label=f"{rule}: {group[0]} · {group[1]}{ratio}")
        left.axhline(1.0, color="grey", linestyle="--", label="ceiling")
        left.set_ylim(-0.5, 1.5)  # a Ceiling barely above the Floor makes gaps of 20: off this scale, in the table
        left.set_xlabel("β")
        left.set_ylabel("gap closed (test)")
        left.set_title("Gap closed vs β (gate on)")
        left.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _machine() -> str:
    import os
    import platform

    return f"{platform.machine()}, {os.cpu_count()} CPUs"
