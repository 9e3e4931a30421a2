"""Retrieval-head probe (Wu et al. 2024, "Retrieval Head Mechanistically Explains Long-Context Factuality"):
per layer and head of bundled-agent, how often the position a head attends to most, while the verifier is
teacher-forced through a NIAH needle's answer (1k and 2k tokens, depths 20/50/80%, four needles), is the needle
token being copied. Prints the best head per layer.

    python experiments/long-drafter/retrieval_heads.py"""
import torch, numpy as np
from asymspec_agents.engine import AsymSpecEngine
from asymspec_agents.bench import niah
from asymspec_agents.context import DualContext
eng = AsymSpecEngine.shared("bundled-agent", None)
model, tok = eng.verifier, eng.tokenizer
model.config._attn_implementation = "eager"
try:
    model.set_attn_implementation("eager")
except Exception as e: print(e)
h = niah.Haystack(tok)
ctx = DualContext(tok)
L = model.config.num_hidden_layers; H = model.config.num_attention_heads
hits = np.zeros((L, H)); total = 0
for needle in niah.NEEDLES:
  for length in (1000, 2000):
    for depth in (20, 50, 80):
        item = h.item(needle, length, depth)
        v = ctx.render(item.messages)
        prompt = v.full_ids
        ans = tok(" " + needle.facts[0], add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt + ans])
        # where the answer tokens sit in the needle
        seq = prompt
        starts = [i for i in range(len(seq) - len(ans) + 1) if seq[i:i+len(ans)] == ans]
        if not starts:
            ans = tok(needle.facts[0], add_special_tokens=False)["input_ids"]; ids = torch.tensor([prompt + ans])
            starts = [i for i in range(len(seq) - len(ans) + 1) if seq[i:i+len(ans)] == ans]
        if not starts: print("no match", needle.name); continue
        s0 = starts[0]
        with torch.no_grad():
            out = model(ids, output_attentions=True)
        n = len(prompt)
        for j in range(len(ans)):  # predicting answer token j at position n-1+j; copy source s0+j
            q = n - 1 + j
            for l in range(L):
                a = out.attentions[l][0, :, q, :]  # [H, T]
                hits[l] += (a.argmax(-1) == s0 + j).float().numpy()
            total += 1
score = hits / total
np.set_printoptions(precision=2, suppress=True, linewidth=200)
print("per layer max head score:", [(l, round(float(score[l].max()), 2)) for l in range(L)])
print("per layer sum:", [(l, round(float(score[l].sum()), 2)) for l in range(L)])
