"""Bad input gets the project's own errors; stop strings, EOS, streaming and stats behave."""

import pytest

from asymspec_agents import (AsymSpecEngine, ConfigError, ContextTooLongError, GenerationConfig, InvalidInputError,
                             VocabularyMismatchError)
from asymspec_agents.testing import byte_tokenizer, tiny_random_model, tiny_random_pair


def test_mismatched_vocabularies_without_a_bridge_are_refused_naming_the_first_differing_ids(pair):
    other = byte_tokenizer()
    vocab = other.get_vocab()
    swapped = {t: (vocab["b"] if i == vocab["a"] else vocab["a"] if i == vocab["b"] else i) for t, i in vocab.items()}
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    shuffled = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(swapped, unk_token="<|endoftext|>")))
    with pytest.raises(VocabularyMismatchError, match=f"id {vocab['a']}"):
        AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer, drafter_tokenizer=shuffled, bridge_vocabularies=False)


def test_a_model_with_fewer_logits_than_tokens_is_refused(pair):
    small = tiny_random_model(100)
    with pytest.raises(VocabularyMismatchError, match="100 output logits"):
        AsymSpecEngine(pair.verifier, small, pair.tokenizer)


def test_padded_embedding_rows_are_tolerated_and_never_emitted(pair):
    padded = tiny_random_model(len(pair.tokenizer) + 64, seed=5)
    engine = AsymSpecEngine(pair.verifier, padded, pair.tokenizer)
    result = engine.generate([5, 6, 7, 8], max_new_tokens=30, mode="symmetric", temperature=1.0)
    assert max(result.token_ids) < len(pair.tokenizer)


@pytest.mark.parametrize("settings, message", [
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(beta=-0.1), "beta"),
    (dict(gamma=0.0), "gamma"),
    (dict(gamma=1.5), "gamma"),
    (dict(mode="turbo"), "Unknown mode"),
    (dict(top_p=0.0), "top_p"),
    (dict(temperature=-1.0), "temperature"),
    (dict(k_max=0), "k_max"),
    (dict(seed=2**64), "seed"),
])
def test_out_of_range_settings_raise_config_errors(settings, message):
    with pytest.raises(ConfigError, match=message):
        GenerationConfig(**settings)


def test_empty_and_out_of_vocabulary_ids_raise_input_errors(engine):
    with pytest.raises(InvalidInputError, match="full_ids is empty"):
        engine.generate([], [1, 2])
    with pytest.raises(InvalidInputError, match="outside the vocabulary"):
        engine.generate([1, 2, 100_000], [1, 2])
    with pytest.raises(InvalidInputError, match="Pass full_ids"):
        engine.generate()


def test_prompt_longer_than_the_window_raises_and_long_generation_is_capped():
    small = tiny_random_pair(seed=2, max_positions=64)
    engine = AsymSpecEngine(small.verifier, small.drafter, small.tokenizer)
    with pytest.raises(ContextTooLongError, match="64"):
        engine.generate(list(range(3, 70)), list(range(3, 10)))
    result = engine.generate(list(range(3, 60)), list(range(3, 10)), max_new_tokens=50, stop=[], decisions=None)
    assert len(result.token_ids) <= 64 - 57
    assert result.finish_reason in {"length", "stop"}


def test_mode_needing_a_drafter_without_one_says_how_to_fix(pair):
    engine = AsymSpecEngine(pair.verifier, None, pair.tokenizer)
    assert engine.generate([5, 6, 7], mode="full", max_new_tokens=3).stats.new_tokens == 3
    with pytest.raises(ConfigError, match="needs a drafter"):
        engine.generate([5, 6, 7], mode="asymmetric")


def test_stop_string_cuts_the_text_and_is_never_streamed(engine, views):
    full, comp = views
    plain = engine.generate(full, comp, max_new_tokens=40, decisions=None)
    text = plain.text
    stop = text[10:13]
    expected = text[: text.find(stop)]
    chunks = list(engine.stream(full, comp, max_new_tokens=40, stop=[stop], decisions=None))
    assert "".join(c.text for c in chunks) == expected
    assert chunks[-1].finish_reason == "stop"
    assert all(stop not in c.text for c in chunks)
    assert engine.generate(full, comp, max_new_tokens=40, stop=stop, decisions=None).text == expected


def test_stream_and_generate_agree_and_the_last_chunk_carries_stats(engine, views):
    full, comp = views
    result = engine.generate(full, comp, max_new_tokens=30)
    chunks = list(engine.stream(full, comp, max_new_tokens=30))
    assert "".join(c.text for c in chunks) == result.text
    assert [t for c in chunks for t in c.token_ids] == result.token_ids
    assert chunks[-1].stats is not None and chunks[-1].finish_reason == result.finish_reason
    assert len(chunks) > 2


def test_eos_from_the_generation_config_ends_generation_with_finish_reason_stop():
    pair = tiny_random_pair(seed=4, same=True)
    free = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer).generate([5, 6, 7], max_new_tokens=30)
    eos = free.token_ids[6]
    pair.verifier.generation_config.eos_token_id = [2, eos]
    result = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer).generate([5, 6, 7], max_new_tokens=30)
    cut = free.token_ids.index(eos)
    assert result.finish_reason == "stop"
    assert result.token_ids == free.token_ids[: cut + 1]
    assert result.text == pair.tokenizer.decode(result.token_ids[:-1])


def test_stats_count_tokens_forwards_and_flops_per_stream(engine, views):
    full, comp = views
    stats = engine.generate(full, comp, max_new_tokens=20).stats
    data = stats.to_dict()
    assert set(stats.streams) == {"S_full", "S_comp", "V_comp"}
    assert stats.streams["V_comp"].prefill_tokens + stats.streams["V_comp"].reused_tokens == len(comp) - 1
    assert stats.streams["S_full"].prefill_tokens + stats.streams["S_full"].reused_tokens == len(full) - 1
    assert data["new_tokens"] == 20 == len(data["token_slots"]) == len(data["token_sources"])
    assert data["verifier_flops"] > 0 and data["drafter_flops"] > 0
    assert sum(data["accepted_lengths"].values()) == data["blocks"]
    assert 0 <= data["acceptance_rate"] <= 1 and data["wall_seconds"] > 0


@pytest.mark.parametrize("temperature", [5e-324, 1e-300, 1e-6])
def test_a_temperature_too_small_to_divide_by_decodes_greedily(engine, temperature):
    """Below 1e-5 (vLLM's line too) logits / T overflow to inf and softmax to NaN: such a temperature is greedy."""
    greedy = engine.generate([5, 6, 7, 8], [5, 8], max_new_tokens=12, mode="asymmetric", temperature=0.0)
    tiny = engine.generate([5, 6, 7, 8], [5, 8], max_new_tokens=12, mode="asymmetric", temperature=temperature, seed=1)
    assert tiny.token_ids == greedy.token_ids
