"""`asymspec bench drafters` on tiny random models: a layer cut costs fewer FLOPs, an int8 copy as many, less memory."""

import json

from asymspec_agents.bench.drafters import describe, measure, write_outputs
from asymspec_agents.models.loading import quantized_copy
from asymspec_agents.models.students import layer_subset
from asymspec_agents.testing import tiny_random_model


def test_costs_per_token_of_a_layer_cut_and_an_int8_copy(tmp_path):
    verifier = tiny_random_model(300, layers=6, hidden=128)
    models = {"v": verifier, "cut": layer_subset(verifier, [0, 1]), "int8": quantized_copy(verifier)}
    context = list(range(3, 203))
    found = measure(models, context, repeats=3)
    assert all(row["seconds"] > 0 for row in found.values())
    assert found["cut"]["flops"] < 0.6 * found["v"]["flops"]
    assert found["int8"]["flops"] == found["v"]["flops"]
    sizes = {name: describe(model) for name, model in models.items()}
    assert sizes["cut"]["layers"] == 2 and sizes["int8"]["weight_mb"] < sizes["v"]["weight_mb"]
    report = {"verifier": "v", "threads": 1, "date": "today", "models": sizes, "contexts": {"200": found}}
    write_outputs(report, str(tmp_path / "drafters"))
    table = (tmp_path / "drafters.md").read_text()
    assert "| cut | 2 |" in table and "| v | 6 |" in table
    assert max(len(line) for line in table.splitlines()[4:]) <= 80
    assert json.loads((tmp_path / "drafters.json").read_text())["contexts"]["200"]["v"]["flops"] > 0
    assert (tmp_path / "drafters.png").stat().st_size > 0
