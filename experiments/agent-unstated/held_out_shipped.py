"""A verifier on v6's held-out draw (the 80 conversations and 13 lookups v6's report used), so that verifiers trained
with other recipes, whose own reports draw other conversations, compare on the same ones:

    python experiments/agent-unstated/held_out_shipped.py FOLDER [OUT.json]
        # FOLDER: that verifier's student.json and delta (the 2026-12-04 bundled-agent's for held-out-shipped.json,
        # OUT's default); needs runs/agent-v6's caches
"""
import json
import sys
from pathlib import Path

import torch

from asymspec_agents.models import load_model
from asymspec_agents.training.agent.run import GeneralAnswers, evaluate, evaluate_lookups
from asymspec_agents.training.agent.transcripts import held_out_conversations

torch.set_num_threads(1)
folder = sys.argv[1]
out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).with_name("held-out-shipped.json")
raw, tokenizer = load_model("bundled")
answers = GeneralAnswers(raw, tokenizer, Path("runs/agent-v6/general_answers.json"))
dev_set = held_out_conversations(80, 0, answers, near_misses=0.03, twins=0.08, unstated=0.03)
model, _ = load_model(folder)
result = {"dev": evaluate(model, tokenizer, dev_set, f"{folder} on v6's draw"),
          "lookups": evaluate_lookups(model, tokenizer, 13, folder)}
out.write_text(json.dumps(result, indent=1))
print(result["dev"]["counts"], {k: round(v, 2) for k, v in result["dev"]["rates"].items()},
      result["dev"]["no_call_by_kind"], {k: v for k, v in result["lookups"].items() if k != "replies"})
