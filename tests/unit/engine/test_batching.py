"""The forward thread: forwards of several streams of one model run as one ragged forward, with the logits and
caches each stream would get alone; concurrent calls batch and still reply as serial calls do."""

import threading

import pytest
import torch

from asymspec_agents import threads
from asymspec_agents.engine import AsymSpecEngine, GenerationConfig, batching
from asymspec_agents.engine.batching import Forwards, Request, ragged_forward, single_forward
from asymspec_agents.engine.kv_cache import make_cache
from asymspec_agents.testing import generate_at_once, tiny_random_model

VOCAB = 300


def qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024)
    torch.manual_seed(0)
    return Qwen3ForCausalLM(config).eval()


def filled(model, length: int, precision: str, seed: int):
    """A cache holding `length` random tokens, and those tokens."""
    cache = make_cache(model.config, precision)
    tokens = torch.randint(3, VOCAB, (length,), generator=torch.Generator().manual_seed(seed)).tolist()
    if tokens:
        with torch.inference_mode():
            single_forward(Request(model, cache, 0, tokens, 1))
    return cache, tokens


@pytest.mark.parametrize("family", ["llama", "qwen3"])
@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_a_ragged_forward_gives_each_stream_what_it_gets_alone(family, precision):
    model = tiny_random_model(VOCAB) if family == "llama" else qwen3()
    assert batching.batchable(model)
    # a prefill from empty, one decoded token, a verification block keeping all rows, one keeping the last two
    shapes = [(0, 7, 1), (40, 1, 1), (25, 5, 5), (60, 4, 2)]
    alone, together = [], []
    for i, (past, new, keep) in enumerate(shapes):
        tokens = torch.randint(3, VOCAB, (new,), generator=torch.Generator().manual_seed(100 + i)).tolist()
        for out in (alone, together):
            cache, _ = filled(model, past, precision, seed=i)
            out.append(Request(model, cache, past, tokens, keep))
    with torch.inference_mode():
        expected = [single_forward(r) for r in alone]
        got = ragged_forward(together)
        following = [single_forward(Request(model, r.cache, r.past + len(r.tokens), [5], 1)) for r in together]
        expected_following = [single_forward(Request(model, r.cache, r.past + len(r.tokens), [5], 1)) for r in alone]
    for e, g, (_, _, keep) in zip(expected, got, shapes):
        assert g.shape == (keep, VOCAB)
        torch.testing.assert_close(g, e, atol=2e-4, rtol=1e-4)
    for e, g in zip(expected_following, following):  # the caches hold the same keys and values as alone
        torch.testing.assert_close(g, e, atol=2e-4, rtol=1e-4)


def test_forwards_waiting_together_run_as_one_and_a_faulty_one_fails_alone(monkeypatch):
    model = tiny_random_model(VOCAB)
    forwards = Forwards()
    forwards.GATHER_SECONDS = 30.0  # the batch waits for all three calls: deterministic
    sizes = []
    real_ragged = batching.ragged_forward
    monkeypatch.setattr(batching, "ragged_forward", lambda batch: sizes.append(len(batch)) or real_ragged(batch))
    requests = [Request(model, filled(model, 10 + i, "float32", i)[0], 10 + i, [4, 5], 1) for i in range(3)]
    requests[1].tokens = [4, VOCAB + 50]  # no such token: its forward fails, the others' do not
    results = {}

    def call(i):
        with forwards.call():
            try:
                results[i] = forwards.run(requests[i])
            except Exception as exc:  # noqa: BLE001
                results[i] = exc

    with forwards.call():  # a fourth call that never asks: the batch waits for the three, then runs
        workers = [threading.Thread(target=call, args=(i,)) for i in range(3)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=60)
    assert sizes == [3]  # one ragged forward tried for all three
    assert isinstance(results[1], IndexError)
    for i in (0, 2):  # run again alone after the batch failed, from caches put back as they were
        assert results[i].shape == (1, VOCAB)
        cache, tokens = filled(model, 10 + i, "float32", i)
        with torch.inference_mode():
            torch.testing.assert_close(results[i], single_forward(Request(model, cache, 10 + i, [4, 5], 1)))
        assert requests[i].cache.get_seq_length() == 10 + i + 2


def test_concurrent_calls_batch_and_reply_as_serial_calls_do(pair, monkeypatch):
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    config = GenerationConfig(max_new_tokens=24, copy_weight=0.0)
    prompts = []
    for i in range(4):
        full = pair.tokenizer(f"Document {i}: " + "the quick brown fox jumps over the lazy dog. " * (3 + i))["input_ids"]
        prompts.append((full, full[:12] + full[-12:]))
    serial = [engine.generate(full, comp, config).token_ids for full, comp in prompts]
    engine.reset()
    sizes = []
    real_run = batching._run
    monkeypatch.setattr(batching, "_run", lambda batch: sizes.append(len(batch)) or real_run(batch))
    assert generate_at_once(engine, prompts, config) == serial
    assert max(sizes) > 1  # some forwards ran together


def test_single_core_gives_this_thread_one_core_for_the_block_only():
    before = torch.get_num_threads()
    with threads.single_core():
        assert torch.get_num_threads() == (1 if threads._gomp is not None else before)
    assert torch.get_num_threads() == before
