"""A verifier on v6's held-out draw (the 80 conversations and 13 lookups of ../agent-unstated/'s v6 report), so that
verifiers trained with other recipes, whose own reports draw other conversations, compare on the same ones:

    python benchmarks/results/agent-company/held_out_on_v6_draw.py FOLDER OUT.json   # FOLDER: student.json and
                                                                                      # delta; needs runs/agent-v6
"""
import json
import sys
from pathlib import Path

import torch

from asymspec_agents.models import load_model
from asymspec_agents.training.agent.run import GeneralAnswers, evaluate, evaluate_lookups
from asymspec_agents.training.agent.transcripts import conversations, split_questions, split_tools

torch.set_num_threads(1)
raw, tokenizer = load_model("bundled")
_, dev_tools = split_tools()
_, dev_questions = split_questions()
answers = GeneralAnswers(raw, tokenizer, Path("runs/agent-v6/general_answers.json"))
dev_set = conversations(80, 10_000, dev_tools, dev_questions, answers, near_misses=0.03, twins=0.08, unstated=0.03)
model, _ = load_model(sys.argv[1])
result = {"dev": evaluate(model, tokenizer, dev_set, "on v6's draw"),
          "lookups": evaluate_lookups(model, tokenizer, 13, sys.argv[1])}
Path(sys.argv[2]).write_text(json.dumps(result, indent=1))
print(result["dev"]["counts"], {k: round(v, 2) for k, v in result["dev"]["rates"].items()},
      result["dev"]["no_call_by_kind"], {k: v for k, v in result["lookups"].items() if k != "replies"})
