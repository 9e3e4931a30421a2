"""The needle/tool_output cells (head/tail 4x) for the AsymSpec systems with the copy head (the new default), on
the first 12 items of each task, against the v10 run without it (experiments/agent-company/v10-assembled-cells.json)."""
import json
from asymspec_agents.bench.accuracy import System, run_item, policy_for
from asymspec_agents.bench.tasks import build
from asymspec_agents.chat import AsymSpecChat
from asymspec_agents.engine import AsymSpecEngine
old = {(r["task"], r["item"], r["system"]): r for r in json.load(open("experiments/agent-company/v10-assembled-cells.json"))["records"]}
engine = AsymSpecEngine.shared("bundled-agent")
out = []
for task in ("needle", "tool_output"):
    items = build(task, 50)
    policy = policy_for(task, "head_tail", 4, engine.tokenizer, items)
    chat = AsymSpecChat(engine, policy=policy)
    for rule in ("ratio", "fused"):
        system = System(f"{rule} β=1", (("mode", "asymmetric"), ("acceptance", rule), ("beta", 1.0), ("cda", True)))
        for item in items[:12]:
            r = run_item(chat, item, system, "head_tail", 4, cold=True)
            o = old.get((task, item.id, system.name))
            c = old.get((task, item.id, "ceiling"))
            out.append({**r, "old_correct": o and o["correct"], "old_flops": o and (o["verifier_flops"] + o["drafter_flops"]),
                        "ceiling_flops": c and c["verifier_flops"]})
            print(task, rule, item.id, r["correct"], o and o["correct"], flush=True)
json.dump(out, open("experiments/long-drafter/copy-head-checks/cells-copy.json", "w"))
for task in ("needle", "tool_output"):
    for rule in ("ratio", "fused"):
        rs = [r for r in out if r["task"].startswith(task[:6]) and r["system"].startswith(rule)]
        rs = [r for r in out if r["task"] == rs[0]["task"] and r["system"].startswith(rule)] if rs else []
        flops = sum(r["verifier_flops"] + r["drafter_flops"] for r in rs) / sum(r["ceiling_flops"] for r in rs)
        print(task, rule, "copy", sum(r["correct"] for r in rs), "before", sum(bool(r["old_correct"]) for r in rs), "of", len(rs), f"FLOPs x Ceiling {flops:.2f}")
