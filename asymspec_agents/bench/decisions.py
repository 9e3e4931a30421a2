"""`asymspec bench decisions`: decision-point scheduling on and off, on an int8 KV cache.

On the tool-selection and needle tasks, AsymSpec runs with the default decision policy (tool names, final
answers, option letters, plus "code is …" for the needle answers) and with no scheduling (a fixed-block stack).
Reported: task accuracy, decision-token accuracy (the decision token equals the one the verifier decodes alone
on the same cache), the share of decision tokens committed at verification slot 0, and the speed cost of
ending blocks early (seconds per item, blocks per item).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tqdm import tqdm

from .common import RESULTS, markdown_table, median, write_json, write_report
from .tasks import build

NEEDLE_TRIGGER = r"\b(?:vault|code) (?:is|was)\s*:?\s*$"  # the needle answer: "... vault is 1234"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec bench decisions", description=__doc__)
    parser.add_argument("--items", type=int, default=12)
    parser.add_argument("--kv-cache", default="int8", choices=["float32", "bfloat16", "int8"])
    parser.add_argument("--out", default=str(RESULTS / "decisions"),
                        help=f"output prefix (default {RESULTS / 'decisions'})")
    args = parser.parse_args(argv)
    from ..engine import AsymSpecEngine

    engine = AsymSpecEngine.from_pretrained("bundled", "bundled", kv_cache=args.kv_cache)
    rows = run(engine, args.items)
    report = {"settings": vars(args), "rows": rows}
    out = Path(args.out)
    write_json(Path(str(out) + ".json"), report)
    write_report(str(out) + ".md", render(report))
    print(render(report))
    return 0


def run(engine, count: int) -> list[dict]:
    from ..chat import AsymSpecChat
    from ..engine import DecisionPolicy, GenerationConfig
    from ..engine.decisions import DEFAULT_TRIGGERS

    policies = {"scheduled": DecisionPolicy(triggers=DEFAULT_TRIGGERS + (NEEDLE_TRIGGER,)), "fixed blocks": None}
    tag_only = DecisionPolicy(triggers=DEFAULT_TRIGGERS + (NEEDLE_TRIGGER,))
    chat = AsymSpecChat(engine, config=GenerationConfig(max_new_tokens=48))
    rows = []
    items = build("tools", count) + build("needle", count)
    for item in tqdm(items, desc="decision scheduling", unit="item"):
        request = dict(tools=item.tools or None, tool_choice="required" if item.tools else None,
                       parallel_tool_calls=False, query=item.query)
        views = chat.context.render(item.messages, tools=request["tools"], query=item.query)
        engine.prefill(views.full_ids, views.comp_ids)
        # the verifier alone on the same cache: the reference for decision tokens
        reference = chat.reply(item.messages, **request, mode="compressed", decisions=tag_only)
        for name, policy in policies.items():
            start = time.perf_counter()
            reply = chat.reply(item.messages, **request, mode="asymmetric", decisions=policy)
            seconds = time.perf_counter() - start
            tokens, expected = reply.token_ids, reference.token_ids
            # the reference's decision points that the reply reached with the same prefix (same context, so
            # the same trigger fired): where scheduling must have put them at slot 0
            positions = [p for p in reference.stats.decision_positions if tokens[:p] == expected[:p] and p < len(tokens)]
            rows.append({
                "task": item.task, "item": item.id, "policy": name, "correct": item.correct(reply),
                "decision_tokens": len(positions),
                "decision_tokens_match": sum(1 for p in positions if tokens[p] == expected[p]),
                "decision_points_tagged": reply.stats.decision_points,
                "tagged_at_slot0": reply.stats.decision_points_at_slot0,
                "decision_slots": [reply.stats.token_slots[p] for p in positions],
                "seconds": seconds, "blocks": reply.stats.blocks, "acceptance": reply.stats.acceptance_rate,
            })
    return rows


def render(report: dict) -> str:
    rows = report["rows"]
    header = ["task", "policy", "task accuracy", "decision-token accuracy", "decision tokens at slot 0",
              "median s/item", "blocks/item", "acceptance"]
    table = []
    for task in sorted({r["task"] for r in rows}):
        for policy in ("scheduled", "fixed blocks"):
            group = [r for r in rows if r["task"] == task and r["policy"] == policy]
            decisions = sum(r["decision_tokens"] for r in group)
            slots = [s for r in group for s in r["decision_slots"]]
            table.append([task, policy, f"{sum(r['correct'] for r in group) / len(group):.2f}",
                          f"{sum(r['decision_tokens_match'] for r in group)}/{decisions}",
                          f"{sum(1 for s in slots if s == 0)}/{len(slots)}",
                          f"{median([r['seconds'] for r in group]):.2f}",
                          f"{sum(r['blocks'] for r in group) / len(group):.1f}",
                          f"{sum(r['acceptance'] for r in group) / len(group):.0%}"])
    return (f"# Decision-point scheduling ({report['settings']['kv_cache']} KV cache, bundled pair, "
            f"{report['settings']['items']} items per task)\n\n" + markdown_table(header, table) +
            "\nDecision tokens: positions the policy tags when the verifier decodes alone; their accuracy is agreement "
            "with that verifier-alone token. 'fixed blocks' runs without scheduling, as a serving stack with a fixed "
            "block size does.\n")
