"""How readily a verifier calls, and how well it tells where to: the log-odds that its reply opens with a tool call
(the first token of `<tool_call>`, "<") at the reply's start, on the compressed view (what the pair's verifier
reads), for v6's held-out draw (first turns) and BFCL irrelevance (all 240) and multiple (first 100). AUC: how often
a conversation that wants a call scores above one that wants none; the call rates are those of scores above 0 (the
opening more likely than not), a proxy for the greedy decision, not the decision itself.

    python experiments/agent-company/call_scores.py FOLDER OUT.json    # ~4 min, one thread
        # FOLDER: a verifier's student.json and delta (runs/agent-shipped: the 2026-12-04 bundled-agent's);
        # needs runs/agent-v6's caches, like ../agent-unstated/held_out_shipped.py
    python experiments/agent-company/call_scores.py --table OUT.json ...   # the markdown table

"best at 0.9": over every threshold that calls on >= 0.9 of the call-wanted side, the largest share of the other
side left uncalled. On BFCL that threshold is read off BFCL itself: it says what the verifier's ranking allows at
best, not a setting to ship.
"""
import json
import sys
from pathlib import Path


def auc(pos, neg) -> float:
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / max(len(pos) * len(neg), 1)


def best_at(pos, neg, calls: float = 0.9) -> float:
    return max(sum(n <= t for n in neg) / len(neg) for t in sorted(pos) if sum(p > t for p in pos) / len(pos) >= calls)


def rate(scores) -> float:
    return sum(s > 0 for s in scores) / len(scores)


def table(paths: list[str]) -> str:
    rows = ["| verifier | held-out AUC | calls / no call at 0 | best at 0.9 | BFCL AUC | multiple calls / "
            "irrelevance no call at 0 | best at 0.9 |", "|---|---|---|---|---|---|---|"]
    for path in paths:
        d = json.loads(Path(path).read_text())
        pos, neg = d["held_out"]["pos"], d["held_out"]["neg"]
        multiple, irrelevance = d["bfcl"]["multiple"], d["bfcl"]["irrelevance"]
        rows.append(f"| {d['folder']} | {auc(pos, neg):.2f} | {rate(pos):.2f} / {1 - rate(neg):.2f} | "
                    f"{best_at(pos, neg):.2f} | {auc(multiple, irrelevance):.2f} | {rate(multiple):.2f} / "
                    f"{1 - rate(irrelevance):.2f} | {best_at(multiple, irrelevance):.2f} |")
    return "\n".join(rows)


def measure(folder: str) -> dict:
    import torch
    from tqdm import tqdm

    from asymspec_agents.bench.bfcl import load_items, tools_of
    from asymspec_agents.chat import AsymSpecChat
    from asymspec_agents.engine import AsymSpecEngine
    from asymspec_agents.models import load_model
    from asymspec_agents.training.agent.run import GeneralAnswers
    from asymspec_agents.training.agent.transcripts import held_out_conversations

    torch.set_num_threads(1)
    raw, tokenizer = load_model("bundled")
    answers = GeneralAnswers(raw, tokenizer, Path("runs/agent-v6/general_answers.json"))
    dev = held_out_conversations(80, 0, answers, near_misses=0.03, twins=0.08, unstated=0.03)
    model, _ = load_model(folder)
    context = AsymSpecChat(AsymSpecEngine(model, None, tokenizer)).context
    opening = tokenizer.encode("<tool_call>", add_special_tokens=False)[0]

    @torch.no_grad()
    def score(messages, tools) -> float:
        ids = context.render(messages, tools=tools).comp_ids
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)[opening]
        return float(logp - torch.log1p(-logp.exp().clamp(max=1 - 1e-7)))

    held = [(score(c.messages[:1], c.tools), bool(c.expected["calls"])) for c in tqdm(dev, desc="held-out")]
    bfcl = {cat: [score(i.messages, tools_of(i.functions)) for i in tqdm(load_items(cat, n), desc=cat)]
            for cat, n in (("irrelevance", None), ("multiple", 100))}
    return {"folder": folder, "held_out": {"pos": [s for s, want in held if want],
                                           "neg": [s for s, want in held if not want]}, "bfcl": bfcl}


if __name__ == "__main__":
    if sys.argv[1] == "--table":
        print(table(sys.argv[2:]))
    else:
        Path(sys.argv[2]).write_text(json.dumps(measure(sys.argv[1])))
        print(table([sys.argv[2]]))
