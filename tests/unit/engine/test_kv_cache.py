"""Low-precision KV caches: round-trip error within what their format promises; the engine runs on them."""

import pytest
import torch

from asymspec_agents import AsymSpecEngine, ConfigError
from asymspec_agents.engine.kv_cache import dequantize, make_cache, quantize


def test_int8_round_trip_error_is_at_most_half_a_quantization_step():
    x = torch.randn(1, 2, 50, 16) * torch.linspace(0.1, 10, 50)[None, None, :, None]
    q, scale = quantize(x, "int8")
    assert q.dtype == torch.int8 and scale.shape == (1, 2, 50, 1)
    error = (dequantize(q, scale, torch.float32) - x).abs()
    assert (error <= scale / 2 + 1e-6).all()
    assert error.max() > 0  # it really is lossy


def test_bfloat16_round_trip_keeps_three_significant_digits():
    x = torch.randn(1, 2, 10, 16)
    stored, scale = quantize(x, "bfloat16")
    assert stored.dtype == torch.bfloat16 and scale is None
    assert ((dequantize(stored, None, torch.float32) - x).abs() <= x.abs() * 2**-8).all()


@pytest.mark.parametrize("precision, tolerance", [("float32", 1e-5), ("bfloat16", 0.05), ("int8", 0.1)])
def test_cached_decoding_matches_a_full_forward_within_the_precision(pair, precision, tolerance):
    model = pair.verifier
    ids = torch.randint(3, 250, (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        reference = model(ids).logits[0, 30:]
        cache = make_cache(model.config, precision)
        model(ids[:, :30], cache=cache)
        cached = model(ids[:, 30:], cache=cache).logits[0]
        cache.crop(-5)  # rollback keeps scales and values aligned
        again = model(ids[:, 35:], cache=cache).logits[0]
    assert (cached - reference).abs().max() < tolerance
    assert (again - reference[5:]).abs().max() < tolerance
    assert cache.get_seq_length() == 40


def test_engine_on_an_int8_cache_keeps_the_beta_zero_reduction(pair, views):
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer, kv_cache="int8")
    floor = engine.generate(*views, mode="compressed", max_new_tokens=30)
    fused = engine.generate(*views, mode="asymmetric", beta=0.0, cda=False, acceptance="fused", max_new_tokens=30)
    assert fused.token_ids == floor.token_ids


def test_unknown_cache_precision_is_refused(pair):
    with pytest.raises(ConfigError, match="kv_cache"):
        AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer, kv_cache="fp4")


def test_stream_keeping_the_last_logits_returns_the_rows_of_a_full_forward(pair):
    from asymspec_agents.engine.streams import KVStream

    stream = KVStream(pair.verifier, "verifier", "full", pair.verifier.config.vocab_size)
    stream.sync(list(range(3, 33)))
    everything = stream.forward([40, 41, 42])
    stream.rollback(29)
    last = stream.forward([40, 41, 42], keep=1)
    assert last.shape == (1, everything.shape[1])
    assert torch.allclose(last[0], everything[-1], atol=1e-5)
    assert stream.stats.decode_sizes[3] == 2 and stream.stats.decode_partial_logits[3] == 1


def test_a_growing_layer_holds_what_concatenation_holds_and_writes_in_place():
    from transformers.cache_utils import DynamicLayer

    from asymspec_agents.engine.kv_cache import GrowingLayer, layer_bytes

    growing, plain = GrowingLayer(), DynamicLayer()
    rng = torch.Generator().manual_seed(0)
    buffers = set()
    for step, n in enumerate([300, 1, 4, -3, 1, 500, -200, 2]):  # appends and crops, past its spare room
        if n < 0:
            growing.crop(n)
            plain.crop(n)
        else:
            k, v = torch.randn(1, 2, n, 8, generator=rng), torch.randn(1, 2, n, 8, generator=rng)
            keys, values = growing.update(k, v)
            plain.update(k, v)
            assert torch.equal(keys, plain.keys) and torch.equal(values, plain.values)
        assert growing.get_seq_length() == plain.get_seq_length() and torch.equal(growing.keys, plain.keys)
        buffers.add(growing.key_buffer.data_ptr())
    assert len(buffers) <= 4  # grown three times over 806 tokens (an eighth more each): the rest in place
    assert layer_bytes(growing) == growing.key_buffer.numel() * 4 * 2 >= growing.keys.numel() * 4 * 2
    growing.reset()
    assert growing.get_seq_length() == 0 and layer_bytes(growing) == 0
    with pytest.raises(ValueError, match="negative"):
        growing.crop(5)


def test_a_stream_copies_a_donors_keys_onto_its_own_and_continues_as_the_donor_does(pair):
    from asymspec_agents.engine.streams import KVStream

    vocab = len(pair.tokenizer)
    prompt = pair.tokenizer("a shared system prompt and the history of one conversation")["input_ids"]
    donor = KVStream(pair.verifier, "verifier", "comp", vocab)
    donor.sync(prompt)  # the forward thread writes its cache (inference tensors)
    stream = KVStream(pair.verifier, "drafter", "comp", vocab)  # an identical drafter: the same model
    stream.sync(prompt[:6])  # a cache of its own, made on the forward thread
    stream.sync(prompt, donors=[donor])  # the rest copied onto it here, outside inference mode
    assert stream.ids == donor.ids and stream.stats.prefill_tokens == 5
    torch.testing.assert_close(stream.forward([7, 8], keep=2), donor.forward([7, 8], keep=2))
