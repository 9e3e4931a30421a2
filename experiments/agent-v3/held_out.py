"""Held-out replies of one tuned verifier on the near-miss run's held-out set, per kind (README.md beside this).

    python experiments/agent-v3/held_out.py bundled-agent held-out-bundled-agent.json
"""

import json
import sys
from pathlib import Path

import torch

from asymspec_agents.models import load_model
from asymspec_agents.training.agent.run import GeneralAnswers, evaluate
from asymspec_agents.training.agent.transcripts import conversations, split_questions, split_tools

GROUPS = {"a tool fits": ("call", "parallel", "chain", "error"), "nearmiss": ("nearmiss",),
          "offtopic": ("offtopic",), "general": ("general",)}


def main(name: str, out: str) -> None:
    torch.set_num_threads(1)
    raw, tokenizer = load_model("bundled")
    _, dev_tools = split_tools()
    _, dev_questions = split_questions()
    # the raw model's replies to the general questions, decoded once by the training run
    answers = GeneralAnswers(raw, tokenizer, Path("runs/agent-v3/general_answers.json"))
    dev_set = conversations(80, 10_000, dev_tools, dev_questions, answers, near_misses=0.12)
    model, _ = load_model(name)
    result = {group: evaluate(model, tokenizer, [c for c in dev_set if c.kind in kinds], f"{name} {group}")
              for group, kinds in GROUPS.items()}
    Path(out).write_text(json.dumps(result, indent=1))
    for group, r in result.items():
        print(name, group, r["counts"]["conversations"], {k: round(v, 2) for k, v in r["rates"].items()})


if __name__ == "__main__":
    main(*sys.argv[1:3])
