"""The shipped bundled-agent on the twins run's held-out draw (the same 80 conversations its report used):

    python experiments/agent-twins/held_out_shipped.py    # needs runs/agent-twins/general_answers.json
"""
import json
from pathlib import Path
import torch
from asymspec_agents.models import load_model
from asymspec_agents.training.agent.run import GeneralAnswers, evaluate
from asymspec_agents.training.agent.transcripts import held_out_conversations
torch.set_num_threads(2)
raw, tokenizer = load_model("bundled")
answers = GeneralAnswers(raw, tokenizer, Path("runs/agent-twins/general_answers.json"))
dev_set = held_out_conversations(80, 0, answers, near_misses=0.06, twins=0.12)
model, _ = load_model("bundled-agent")
result = evaluate(model, tokenizer, dev_set, "shipped on the twins draw")
Path(__file__).with_name("held-out-shipped.json").write_text(json.dumps(result, indent=1))
print(result["counts"], {k: round(v, 2) for k, v in result["rates"].items()}, result["no_call_by_kind"])
