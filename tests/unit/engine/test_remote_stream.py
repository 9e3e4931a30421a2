"""Remote streams without a server: `RemoteModel`'s request shapes answered by a local tiny model the way vLLM's
completions endpoint answers them (top N plus the chosen token per row, `logprob_token_ids`, greedy generation).
The real server is tested in tests/remote."""

import math

import pytest
import torch

from asymspec_agents import AsymSpecEngine, GenerationConfig
from asymspec_agents.models.remote import RemoteModel, RemoteModelError, dense_row
from asymspec_agents.engine.remote_stream import RemoteStream
from asymspec_agents.engine.streams import forward_together
from asymspec_agents.testing import generate_at_once


class ServedHere(RemoteModel):
    """A `RemoteModel` whose `/completions` is computed here from `model` (full forwards, vLLM's row shape)."""

    def __init__(self, model, tokenizer, top_logprobs: int, fail_at: int | None = None):
        from types import SimpleNamespace

        self.model, self.tokenizer, self.top_logprobs, self.scoring = model, tokenizer, top_logprobs, "batched"
        self.base_url, self.model_id, self.fail_at, self.bodies = "served-here", "tiny", fail_at, []
        self.reasked, self.lose = 0, set()  # lose: requests (1-based) answered as vLLM's batch-wide token ids do
        self.config = SimpleNamespace(max_position_embeddings=4096, vocab_size=len(tokenizer), eos_token_id=None)
        self.generation_config = SimpleNamespace(eos_token_id=None)

    def _completions(self, body: dict) -> dict:
        self.bodies.append(body)
        if self.fail_at is not None and len(self.bodies) == self.fail_at:
            raise RemoteModelError("the server went away")
        assert len(body.get("logprob_token_ids") or []) <= 128, "vLLM refuses longer lists"
        prompts = body["prompt"] if isinstance(body["prompt"][0], list) else [body["prompt"]]
        return {"choices": [self._choice(i, list(p), body) for i, p in enumerate(prompts)]}

    def _choice(self, index: int, ids: list[int], body: dict) -> dict:
        tokens, rows = [], []
        for _ in range(body["max_tokens"]):
            with torch.inference_mode():
                log_p = torch.log_softmax(self.model(torch.tensor([ids])).logits[0, -1].float(), -1)
            chosen = int(log_p.argmax())
            top = range(len(log_p)) if body["logprobs"] == -1 else log_p.topk(body["logprobs"]).indices.tolist()
            shown = body.get("logprob_token_ids") or top
            row = {f"token_id:{t}": float(log_p[t]) for t in {*shown, chosen}}
            if len(self.bodies) in self.lose:  # a step shared with another request's logprob_token_ids
                row = {f"token_id:{chosen}": float(log_p[chosen]), "token_id:0": float("-inf")}
            rows.append(row)
            tokens.append(f"token_id:{chosen}")
            ids.append(chosen)
        return {"index": index, "logprobs": {"tokens": tokens, "top_logprobs": rows}}


def prompts(tokenizer):
    text = ("<|im_start|>user\nthe quick brown fox jumps over the lazy dog, twice over<|im_end|>\n"
            "<|im_start|>assistant\n")
    full = tokenizer(text, add_special_tokens=False)["input_ids"]
    return full, full[:6] + full[-20:]


@pytest.mark.parametrize("acceptance", ["ratio", "fused"])
def test_both_models_served_with_whole_rows_equal_the_engine_in_process(pair, acceptance):
    here = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    served = AsymSpecEngine(ServedHere(pair.verifier, pair.tokenizer, -1),
                            ServedHere(pair.drafter, pair.tokenizer, -1), pair.tokenizer)
    full, comp = prompts(pair.tokenizer)
    for fuse_bonus in (False, True):
        config = GenerationConfig(mode="asymmetric", acceptance=acceptance, max_new_tokens=20, fuse_bonus=fuse_bonus)
        a, b = here.generate(full, comp, config), served.generate(full, comp, config)
        assert b.token_ids == a.token_ids
        assert (b.stats.drafted, b.stats.accepted) == (a.stats.drafted, a.stats.accepted)
        drafting = b.stats.streams["S_full"]
        assert drafting.lookahead_rows > 0 and drafting.requests + drafting.lookahead_rows == drafting.decode_forwards


def test_a_block_is_one_batched_request_of_its_prefixes_and_drafts_outside_the_top_n_are_asked_for(pair):
    verifier = ServedHere(pair.verifier, pair.tokenizer, top_logprobs=2)
    stream = RemoteStream(verifier, "verifier", "comp", len(pair.tokenizer))
    ids = prompts(pair.tokenizer)[0]
    stream.sync(ids[:-4])
    rows = stream.forward(ids[-5:], keep=5)  # the last committed token and four "drafts"
    first = verifier.bodies[0]
    assert first["prompt"] == [ids[:n] for n in range(len(ids) - 4, len(ids) + 1)] and first["max_tokens"] == 1
    with torch.inference_mode():
        exact = torch.log_softmax(pair.verifier(torch.tensor([ids])).logits[0, -5:-1].float(), -1)
    for j, n in enumerate(range(len(ids) - 4, len(ids))):  # exact at the token that follows each prefix
        assert rows[j, ids[n]].item() == pytest.approx(exact[j, ids[n]].item(), abs=1e-4)
    follow_ups = verifier.bodies[1:]
    assert all("logprob_token_ids" in body for body in follow_ups) and len(follow_ups) <= 1
    assert stream.stats.requests == 1 + len(follow_ups) and stream.stats.fill_ins == len(follow_ups)


def test_greedy_decoding_alone_sends_one_generation_request_for_many_tokens(pair):
    served = AsymSpecEngine(ServedHere(pair.verifier, pair.tokenizer, 8), None, pair.tokenizer)
    here = AsymSpecEngine(pair.verifier, None, pair.tokenizer)
    full, comp = prompts(pair.tokenizer)
    config = GenerationConfig(mode="compressed", max_new_tokens=24)
    result = served.generate(full, comp, config)
    assert result.token_ids == here.generate(full, comp, config).token_ids
    stream = result.stats.streams["V_comp"]
    assert stream.requests == 1 and stream.lookahead_rows == result.stats.new_tokens - 1


def test_a_request_that_fails_leaves_the_conversation_as_it_was(pair):
    vocab = len(pair.tokenizer)
    full, comp = prompts(pair.tokenizer)
    config = GenerationConfig(mode="asymmetric", max_new_tokens=16)
    expected = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer).generate(full, comp, config).token_ids
    flaky = ServedHere(pair.drafter, pair.tokenizer, vocab, fail_at=3)
    served = AsymSpecEngine(ServedHere(pair.verifier, pair.tokenizer, vocab), flaky, pair.tokenizer)
    with pytest.raises(RemoteModelError):
        served.generate(full, comp, config)
    assert served.generate(full, comp, config).token_ids == expected


def test_floors_and_unreturned_entries_are_read_off_the_rows_and_delta_reads_those_at_the_floor(pair):
    stream = RemoteStream(ServedHere(pair.verifier, pair.tokenizer, 2), "drafter", "comp", 10)
    a = dense_row({1: math.log(0.5), 4: math.log(0.2)}, 10, 2)[None]
    b = dense_row({2: math.log(0.9), 3: math.log(0.05), 1: math.log(0.001)}, 10, 2)[None]  # 1: a later fill-in
    torch.testing.assert_close(stream.floors(b), torch.tensor([[math.log(0.05)]]))  # the top N's, not the fill-in's
    assert stream.unreturned(b)[0].tolist() == [True, False, False, False] + [True] * 6
    from asymspec_agents.engine import fusion
    from asymspec_agents.engine.remote_stream import TruncatedRows

    full = RemoteStream(ServedHere(pair.verifier, pair.tokenizer, 2), "drafter", "full", 10)
    rows = TruncatedRows({"target": None, "full": full, "comp": stream}, beta=1.0, settles=True)
    delta = fusion.delta_from("contrast", a, b, read=rows.read)
    assert delta[0, 1].item() == pytest.approx(math.log(0.5) - math.log(0.001), abs=1e-5)  # both exact
    assert delta[0, 4].item() == pytest.approx(math.log(0.2) - math.log(0.05), abs=1e-5)  # b at its floor
    assert delta[0, 0].item() == pytest.approx(math.log(0.2) - math.log(0.05), abs=1e-5)  # both at their floors


def test_streams_on_servers_forward_together_and_every_call_ends_before_an_error(pair):
    full = prompts(pair.tokenizer)[0]
    good = RemoteStream(ServedHere(pair.verifier, pair.tokenizer, 4), "verifier", "comp", len(pair.tokenizer))
    bad = RemoteStream(ServedHere(pair.drafter, pair.tokenizer, 4, fail_at=1), "drafter", "comp",
                       len(pair.tokenizer))
    with pytest.raises(RemoteModelError):
        forward_together([(good, full, 3), (bad, full, 3)])
    assert len(good.ids) == len(full) and bad.ids == []  # the answered call counted, the failed one left nothing


@pytest.mark.parametrize("acceptance", ["ratio", "fused"])
def test_a_served_verifier_with_a_tiny_top_n_gives_the_local_tokens(pair, acceptance):
    """Rows of 4 tokens out of 259: drafts and every token whose bound t_N + β·δ could win a fused choice are
    fetched exactly, so greedy decoding with the drafter here equals the engine in process."""
    here = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    served = AsymSpecEngine(ServedHere(pair.verifier, pair.tokenizer, 4), pair.drafter, pair.tokenizer)
    full, comp = prompts(pair.tokenizer)
    config = GenerationConfig(mode="asymmetric", acceptance=acceptance, max_new_tokens=24, fuse_bonus=True)
    result = served.generate(full, comp, config)
    assert result.token_ids == here.generate(full, comp, config).token_ids
    assert result.stats.streams["V_comp"].fill_ins > 0


def test_conversations_on_served_models_run_at_once_and_get_their_serial_replies(pair):
    """Four threads, one engine, both models served: no state crosses conversations (the server here computes
    each request alone, so its numbers do not depend on what else it is serving)."""
    served = AsymSpecEngine(ServedHere(pair.verifier, pair.tokenizer, 16), ServedHere(pair.drafter, pair.tokenizer, 16),
                            pair.tokenizer)
    texts = [f"<|im_start|>user\nsay something about {topic}<|im_end|>\n<|im_start|>assistant\n"
             for topic in ("owls", "rivers", "copper", "tulips")]
    views = [(ids, ids[:4] + ids[-12:]) for ids in (pair.tokenizer(t, add_special_tokens=False)["input_ids"]
                                                    for t in texts)]
    config = GenerationConfig(mode="asymmetric", max_new_tokens=16)
    serial = [served.generate(full, comp, config).token_ids for full, comp in views]
    served.reset()
    assert generate_at_once(served, views, config, timeout=120) == serial


def test_an_answer_that_lost_its_log_probabilities_is_asked_again(pair):
    """vLLM 0.32 answers a top-N request that shares a batch step with a `logprob_token_ids` request with the
    chosen token only: such an answer is asked again, not read as a row."""
    verifier = ServedHere(pair.verifier, pair.tokenizer, top_logprobs=8)
    verifier.lose = {1, 3}
    ids = prompts(pair.tokenizer)[0]
    rows = verifier.rows(ids, keep=3)
    tokens, generated = verifier.generate(ids, 4)
    assert all(len(row) >= 8 for row in rows + generated) and verifier.reasked == 2 and len(verifier.bodies) == 4
