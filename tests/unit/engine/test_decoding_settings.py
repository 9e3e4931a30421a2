"""What a call decodes with (`AsymSpecEngine.decoding`): the one table's defaults, the copy head off for a served
drafter."""

import pytest

from asymspec_agents import AsymSpecEngine, ConfigError, GenerationConfig


def test_a_call_decodes_with_the_tables_defaults_and_a_served_drafter_has_no_copy_head(pair, monkeypatch):
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    assert engine.decoding(GenerationConfig()).copy_weight == 0.9
    assert engine.decoding(GenerationConfig(preset="paper")).copy_weight == 0.0
    monkeypatch.setattr("asymspec_agents.engine.engine.is_remote", lambda model: model is engine.drafter)
    assert engine.decoding(GenerationConfig()).copy_weight == 0.0  # as if the drafter were on a server
    assert engine.decoding(GenerationConfig(copy_weight=0.5)).copy_weight == 0.5  # asked for: then refused at the call
    with pytest.raises(ConfigError, match="copy_weight mixes the drafter's whole rows"):
        engine.generate([5, 6, 7], [6, 7], max_new_tokens=2, copy_weight=0.5)
