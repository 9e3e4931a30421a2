"""Rerun vs shipped bundled-small: delta tensors, and per-kind dev agreement of both on the rerun's dev records.

    python experiments/small-drafter/recipe-rerun/compare.py runs/bundled-small-rerun

writes compare.json into the rerun's folder.
"""
import json, sys
from pathlib import Path
import torch
from safetensors.torch import load_file
from asymspec_agents.models import load_model
from asymspec_agents.models.students import assemble_student
from asymspec_agents.training.distill.run import build_parser, dev_records
from asymspec_agents.training.distill.train import evaluate_by_kind

rerun = Path(sys.argv[1])
shipped = Path("asymspec_agents/models/drafters/bundled-small")
a, b = load_file(shipped / "delta.safetensors"), load_file(rerun / "delta.safetensors")
assert a.keys() == b.keys()
same = all(torch.equal(a[k], b[k]) for k in a)
rel = max(((a[k].float() - b[k].float()).norm() / a[k].float().norm().clamp_min(1e-12)).item() for k in a)
print(f"delta tensors: {len(a)}; bit-identical: {same}; worst relative L2 difference: {rel:.4f}")
verifier, tok = load_model("bundled")
dev = dev_records(verifier, tok, build_parser().parse_args(["--out", str(rerun)]), rerun / "teacher")  # the recipe's
out = {}
for name, folder in (("shipped", shipped), ("rerun", rerun)):
    student = assemble_student(verifier, folder)
    overall, kinds = evaluate_by_kind(student, dev)
    out[name] = {"all": overall, **kinds}
    print(name, json.dumps({k: {m: round(v, 3) if isinstance(v, float) else v for m, v in row.items()} for k, row in out[name].items()}))
Path(rerun / "compare.json").write_text(json.dumps({"bit_identical": same, "worst_relative_l2": rel, **out}, indent=2))
