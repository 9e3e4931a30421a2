"""What a call decodes with (`AsymSpecEngine.decoding`): the one table's defaults, the copy head off for a served
drafter."""

from asymspec_agents import AsymSpecEngine, GenerationConfig


def test_a_call_decodes_with_the_tables_defaults_and_a_served_drafter_has_no_copy_head(pair, monkeypatch):
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    assert engine.decoding(GenerationConfig()).copy_weight == 0.9
    assert engine.decoding(GenerationConfig(preset="paper")).copy_weight == 0.0
    monkeypatch.setattr("asymspec_agents.engine.engine.is_remote", lambda model: model is engine.drafter)
    assert engine.decoding(GenerationConfig()).copy_weight == 0.0  # as if the drafter were on a server
    assert engine.decoding(GenerationConfig(copy_weight=0.5)).copy_weight == 0.5  # asked for: then refused at the call
