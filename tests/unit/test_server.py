"""The OpenAI-compatible app in process (FastAPI's TestClient) on a tiny random pair: wire format and errors.

The real server process, the `openai` client, ChatOpenAI and concurrent load are in
tests/integration/test_server.py."""

import json

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from asymspec_agents import AsymSpecEngine, GenerationConfig  # noqa: E402
from asymspec_agents.chat import AsymSpecChat  # noqa: E402
from asymspec_agents.server.app import create_app  # noqa: E402
from asymspec_agents.testing import png_bytes, tiny_random_pair  # noqa: E402

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
                          "required": ["city"]}}}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def chat():
    pair = tiny_random_pair(seed=0)
    return AsymSpecChat(AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer),
                        config=GenerationConfig(max_new_tokens=24))


@pytest.fixture(scope="module")
def client(chat):
    with TestClient(create_app(chat, model_name="tiny")) as client:
        yield client


def post(client, **body):
    return client.post("/v1/chat/completions", json={"model": "tiny", "messages": USER, **body})


def events(response) -> list:
    lines = [line for line in response.text.split("\n\n") if line]
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    return [json.loads(line[6:]) for line in lines[:-1]]


def test_models_and_health(client):
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["tiny"]
    assert client.get("/v1/models/tiny").json()["id"] == "tiny"
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["max_queue"] == 16 and "hit_rate" in health["cache_pool"]


def test_a_completion_reports_the_verifiers_view_as_prompt_tokens_and_the_full_view_in_the_extension(client, chat):
    long_user = USER + [  # a tool result over its 256-token budget: the verifier reads part of it
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Here is a long weather note. " * 60}]
    body = client.post("/v1/chat/completions", json={"model": "tiny", "messages": long_user}).json()
    assert body["object"] == "chat.completion" and body["choices"][0]["finish_reason"] in {"stop", "length"}
    usage, extension = body["usage"], body["asymspec"]
    assert usage["prompt_tokens"] == chat.count_tokens(long_user) < extension["full_input_tokens"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert extension["mode"] == "asymmetric" and 0 <= extension["acceptance_rate"] <= 1


def test_the_stream_adds_up_to_the_completion(client):
    whole = post(client, seed=3).json()["choices"][0]["message"]["content"]
    chunks = events(post(client, seed=3, stream=True, stream_options={"include_usage": True}))
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == whole
    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


def test_tool_calls_come_back_in_openai_form_and_stream_one_delta_per_call(client):
    body = post(client, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False, max_tokens=120).json()
    message = body["choices"][0]["message"]
    assert body["choices"][0]["finish_reason"] == "tool_calls" and message["content"] is None
    (call,) = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_") and call["function"]["name"] == "get_weather"
    assert isinstance(json.loads(call["function"]["arguments"])["city"], str)
    chunks = events(post(client, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}},
                         parallel_tool_calls=False, max_tokens=120, stream=True))
    deltas = [c["choices"][0]["delta"]["tool_calls"] for c in chunks if c["choices"] and "tool_calls" in c["choices"][0]["delta"]]
    assert len(deltas) == 1 and deltas[0][0]["index"] == 0 and deltas[0][0]["function"]["name"] == "get_weather"


def test_a_tool_result_names_its_tool_by_the_call_id(client):
    history = USER + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 C"}]
    response = client.post("/v1/chat/completions", json={"model": "tiny", "messages": history, "tools": [WEATHER]})
    assert response.status_code == 200, response.text


def test_a_cut_off_call_sent_back_is_read_as_the_text_the_model_wrote(chat):
    from asymspec_agents.server.openai_format import to_messages

    cut = '{"name": "get_weather", "arguments": {"city": "Par'
    (message,) = to_messages([{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": cut}}]}])
    assert message["tool_calls"] == [] and message["content"] == "\n<tool_call>\n" + cut


def test_json_schema_response_format_gives_json_of_that_schema(client):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    body = post(client, max_tokens=30, response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}).json()
    content = body["choices"][0]["message"]["content"]
    if body["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(content)["ok"], bool)
    else:
        assert content.startswith("{")


@pytest.mark.parametrize("body, status, says", [
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "unknown role 'wizard'"),
    ({"n": 2}, 400, "one choice"),
    ({"logprobs": True}, 400, "logprobs"),
    ({"temperature": 5}, 400, "temperature"),
    ({"seed": -2**63 - 1}, 400, "seed"),
    ({"max_tokens": 0}, 400, "max_tokens"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, 400, "Tool name"),
    ({"tools": [WEATHER], "tool_choice": "get_time"}, 400, "names no bound tool"),
    ({"tool_choice": "required"}, 400, "needs bound tools"),
    ({"response_format": {"type": "json_schema"}}, 400, "response_format"),
    ({"asymspec": {"warp": 9}}, 400, "warp"),
    ({"asymspec": {"gamma": 7}}, 400, "gamma"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
     "not a base64 data URL"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://a.b/c.png"}}]}]},
     400, "nothing here fetches images"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64,bm90IGFuIGltYWdl"}}]}]}, 400, "not an image that can be read"),
    ({"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400,
     "images go in user and tool messages"),
    ({"messages": [{"role": "tool", "tool_call_id": "call_9", "content": "x"}]}, 400, "matches no earlier tool call"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}]}, 400, "a tool call needs"),
    ({"model": "gpt-4"}, 404, "not served here"),
    ({"messages": [{"role": "user", "content": "word " * 5000}]}, 400, "the models' window"),
])
def test_bad_requests_get_a_4xx_that_says_what_to_change(client, body, status, says):
    response = client.post("/v1/chat/completions", json={"model": "tiny", "messages": USER, **body})
    assert response.status_code == status, response.text
    assert says in response.json()["error"]["message"]


PROMPT = "The three primary colours of light are red, green and"


def test_completions_continue_the_plain_prompt_with_no_template_around_it(client, chat):
    body = client.post("/v1/completions", json={"model": "tiny", "prompt": PROMPT, "max_tokens": 8}).json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    (choice,) = body["choices"]
    assert choice["finish_reason"] in {"stop", "length"} and choice["logprobs"] is None
    ids = chat.engine.tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    assert body["usage"]["prompt_tokens"] == len(ids) == body["asymspec"]["full_input_tokens"]
    assert choice["text"] == chat.engine.generate(ids, ids, chat.config, max_new_tokens=8).text
    # a one-string list is the same request
    again = client.post("/v1/completions", json={"model": "tiny", "prompt": [PROMPT], "max_tokens": 8}).json()
    assert again["choices"][0]["text"] == choice["text"] and again["asymspec"]["cache"] == "continued"


def test_a_streamed_completion_adds_up_to_the_whole_one(client):
    request = {"model": "tiny", "prompt": PROMPT, "max_tokens": 8}
    whole = client.post("/v1/completions", json=request).json()
    chunks = events(client.post("/v1/completions", json={**request, "stream": True,
                                                          "stream_options": {"include_usage": True}}))
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == whole["choices"][0]["text"]
    assert chunks[-2]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]


def test_a_completion_prompt_over_the_user_budget_reaches_the_verifier_compressed():
    from asymspec_agents.context import CompressionPolicy

    pair = tiny_random_pair(seed=0)
    chat = AsymSpecChat(AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer),
                        policy=CompressionPolicy(budgets={"user": 32}))
    with TestClient(create_app(chat, model_name="tiny")) as app:
        body = app.post("/v1/completions", json={"model": "tiny", "prompt": "A long report line. " * 40 + PROMPT,
                                                 "max_tokens": 4}).json()
    assert body["usage"]["prompt_tokens"] <= 32 + 8 < body["asymspec"]["full_input_tokens"]


@pytest.mark.parametrize("body, says", [
    ({"echo": True}, "echo"),
    ({"logprobs": 2}, "logprobs"),
    ({"suffix": "the end"}, "suffix"),
    ({"best_of": 3}, "best_of"),
    ({"n": 2}, "one choice"),
    ({"prompt": [PROMPT, PROMPT]}, "one prompt per request"),
    ({"prompt": [[1, 2, 3]]}, "not token ids"),
    ({"prompt": ""}, "prompt is empty"),
    ({"prompt": "word " * 5000}, "the models' window"),
    ({"max_tokens": 10**6}, "max_tokens"),
])
def test_completions_refuse_what_they_cannot_do_with_a_400_that_says_what(client, body, says):
    response = client.post("/v1/completions", json={"model": "tiny", "prompt": PROMPT, **body})
    assert response.status_code == 400, response.text
    assert says in response.json()["error"]["message"]


def test_images_in_user_and_tool_messages_come_as_data_urls_and_reach_the_models_as_stand_ins(client):
    import base64

    url = "data:image/png;base64," + base64.b64encode(png_bytes()).decode()
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is on the screen?"},
                                             {"type": "image_url", "image_url": {"url": url}}]},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                                   {"type": "text", "text": "A map."}]}]
    response = client.post("/v1/chat/completions", json={"model": "tiny", "messages": messages, "max_tokens": 4})
    assert response.status_code == 200, response.text
    with_images = response.json()["usage"]["prompt_tokens"]
    for message in (messages[0], messages[2]):
        message["content"] = [part for part in message["content"] if part["type"] == "text"]
    without = client.post("/v1/chat/completions", json={"model": "tiny", "messages": messages, "max_tokens": 4})
    assert with_images > without.json()["usage"]["prompt_tokens"]  # the two stand-ins are read


def test_a_body_that_is_not_json_gets_a_400(client):
    response = client.post("/v1/chat/completions", content=b"{bad json", headers={"content-type": "application/json"})
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]


def test_stop_strings_end_the_reply_before_them(client):
    whole = post(client, max_tokens=24).json()["choices"][0]["message"]["content"]
    stop = whole[4:6]
    cut = post(client, max_tokens=24, stop=[stop]).json()["choices"][0]
    assert cut["message"]["content"] == whole[:whole.index(stop)] and cut["finish_reason"] == "stop"


def test_sampling_with_a_seed_repeats_and_another_seed_differs(client):
    def sample(seed):
        return post(client, temperature=1.0, seed=seed, max_tokens=24).json()["choices"][0]["message"]["content"]

    assert sample(1) == sample(1) and len({sample(1), sample(2), sample(3)}) > 1


def test_a_cut_off_call_goes_out_as_text_and_only_whole_calls_as_tool_calls():
    """An agent answers every tool call it gets with a result; a call it cannot run (cut off by max_tokens) would
    come back as a result for a call its client drops from the history, so it goes out as the text written."""
    from asymspec_agents.chat import ChatReply, ToolCallSplitter, Usage
    from asymspec_agents.engine import GenerationStats
    from asymspec_agents.server import openai_format as wire

    splitter = ToolCallSplitter()
    whole, cut = '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n', '<tool_call>\n{"name": "a", "arg'
    splitter.push(whole + cut)
    splitter.finish()
    reply = ChatReply(splitter.text, splitter.calls, splitter.invalid, "length", Usage(10, 5, 20),
                      GenerationStats("asymmetric"), whole + cut)
    message = wire.completion(reply, "asymspec", "id")["choices"][0]["message"]
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["a"]
    assert message["content"].startswith('{"name": "a", "arg')


def test_with_api_keys_every_v1_route_wants_one_and_health_stays_open(chat):
    with TestClient(create_app(chat, model_name="tiny", api_keys=("key-one", "key-two"))) as keyed:
        body = {"model": "tiny", "messages": USER, "max_tokens": 4}
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "key-one"},
                        {"X-API-Key": "key-one"}, {"Authorization": "Basic key-one"}):
            refused = keyed.post("/v1/chat/completions", json=body, headers=headers)
            assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key", headers
            assert "--api-key" in refused.json()["error"]["message"]
        assert keyed.get("/v1/models").status_code == 401
        for key in ("key-one", "key-two"):
            headers = {"Authorization": f"Bearer {key}"}
            assert keyed.post("/v1/chat/completions", json=body, headers=headers).status_code == 200
            assert keyed.get("/v1/models", headers=headers).json()["data"][0]["id"] == "tiny"
        assert keyed.get("/health").status_code == 200


def test_without_api_keys_the_server_stays_open(client):
    assert client.get("/v1/models").status_code == 200


def test_metrics_count_what_was_served_in_prometheus_text():
    from prometheus_client.parser import text_string_to_metric_families

    pair = tiny_random_pair(seed=0)  # a pool of its own: the counts are this test's
    chat = AsymSpecChat(AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer))
    with TestClient(create_app(chat, model_name="tiny", api_keys=("k",))) as app:
        headers = {"Authorization": "Bearer k"}
        replies = [app.post("/v1/chat/completions", json={"model": "tiny", "messages": USER, "max_tokens": 6},
                            headers=headers).json() for _ in range(3)]
        app.get("/v1/models/other", headers=headers)  # 404
        app.get("/v1/models")  # 401
        scraped = app.get("/metrics")
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(scraped.text) for s in family.samples}

    def value(name, **labels):
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("asymspec:requests_total", route="/v1/chat/completions", status="200") == 3
    assert value("asymspec:requests_total", route="/v1/models/{name}", status="404") == 1
    assert value("asymspec:requests_total", route="/v1/models", status="401") == 1
    assert value("asymspec:generation_tokens_total") == sum(r["usage"]["completion_tokens"] for r in replies)
    assert value("asymspec:prompt_tokens_total") == sum(r["usage"]["prompt_tokens"] for r in replies)
    assert value("asymspec:e2e_request_latency_seconds_count") == 3
    assert value("asymspec:time_to_first_token_seconds_count") == 3
    assert value("asymspec:spec_decode_num_draft_tokens_total") >= value("asymspec:spec_decode_num_accepted_tokens_total")
    assert value("asymspec:num_requests_admitted") == 0 and value("asymspec:num_requests_waiting") == 0
    assert value("asymspec:kv_cache_budget_bytes") > 0 and value("asymspec:cache_sets") >= 1
    assert sum(value("asymspec:cache_pool_calls_total", outcome=o) for o in ("continued", "branched", "fresh")) == 3


def test_a_request_that_finds_no_room_in_the_kv_budget_in_time_gets_a_503_with_retry_after():
    pair = tiny_random_pair(seed=0)
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer, kv_budget=1)
    engine.pool.room_wait = 0.2
    ids = pair.tokenizer("another conversation, in progress")["input_ids"]
    holding = engine.stream(ids, ids, max_new_tokens=4)
    next(holding)  # its call holds the budget
    with TestClient(create_app(AsymSpecChat(engine), model_name="tiny")) as app:
        busy = app.post("/v1/chat/completions", json={"model": "tiny", "messages": USER, "max_tokens": 6})
        assert busy.status_code == 503 and busy.headers["retry-after"], busy.text
        assert busy.json()["error"]["code"] == "kv_budget_full" and "--kv-budget-gib" in busy.json()["error"]["message"]
        list(holding)
        assert app.post("/v1/chat/completions", json={"model": "tiny", "messages": USER, "max_tokens": 6}).status_code == 200


def test_metrics_count_requests_to_model_servers_and_their_seconds_by_role():
    from types import SimpleNamespace

    from prometheus_client.parser import text_string_to_metric_families

    from asymspec_agents.chat import Usage
    from asymspec_agents.engine.stats import GenerationStats, StreamStats
    from asymspec_agents.server.metrics import ServerMetrics

    metrics = ServerMetrics(lambda: SimpleNamespace(waiting=0, kv_bytes=0, largest_set_bytes=0, budget_bytes=1, sets=0,
                                                    continued=0, branched=0, fresh=0, evictions=0), lambda: 0)
    streams = {"V_comp": StreamStats("verifier", "comp", requests=3, seconds=0.5),
               "S_full": StreamStats("drafter", "full", requests=4, seconds=0.25),
               "S_comp": StreamStats("drafter", "comp", requests=2, seconds=0.25)}
    reply = SimpleNamespace(usage=Usage(10, 5, 20), stats=GenerationStats("asymmetric", streams=streams))
    for _ in range(2):
        metrics.reply(reply, 1.0)
    samples = {(s.name, s.labels.get("role")): s.value
               for family in text_string_to_metric_families(metrics.render().decode()) for s in family.samples}
    assert samples["asymspec:upstream_requests_total", "verifier"] == 6
    assert samples["asymspec:upstream_requests_total", "drafter"] == 12
    assert samples["asymspec:upstream_request_seconds_total", "drafter"] == pytest.approx(1.0)


def test_max_tokens_past_the_window_or_the_servers_limit_gets_a_400(chat):
    window = chat.engine.context_window
    with TestClient(create_app(chat, model_name="tiny", max_tokens_limit=20)) as limited:
        over = post(limited, max_tokens=21)
        assert over.status_code == 400 and "--max-tokens-limit" in over.json()["error"]["message"]
        assert over.json()["error"]["param"] == "max_tokens"
        assert post(limited, max_tokens=20).status_code == 200
    with TestClient(create_app(chat, model_name="tiny")) as open_:
        past = post(open_, max_completion_tokens=window + 1)
        assert past.status_code == 400 and f"window holds {window}" in past.json()["error"]["message"]


def test_a_request_id_is_kept_or_made_returned_and_in_the_log_lines(client, caplog):
    with caplog.at_level("INFO", logger="asymspec.serve"):
        named = client.post("/v1/chat/completions", json={"model": "tiny", "messages": USER, "max_tokens": 4},
            headers={"X-Request-Id": "agent-7.turn-3"})
        made = client.get("/v1/models", headers={"X-Request-Id": "has spaces\\nand a newline"})
    assert named.headers["X-Request-Id"] == "agent-7.turn-3"
    assert len(made.headers["X-Request-Id"]) == 32 and " " not in made.headers["X-Request-Id"]
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("agent-7.turn-3 POST /v1/chat/completions 200") for line in lines), lines
    assert any(line.startswith(made.headers["X-Request-Id"] + " GET /v1/models 200") for line in lines), lines


def test_a_body_over_the_limit_gets_a_413_whether_declared_or_sent_in_chunks(chat):
    with TestClient(create_app(chat, model_name="tiny", max_body_bytes=2000)) as small:
        big = {"model": "tiny", "messages": [{"role": "user", "content": "x" * 3000}]}
        declared = small.post("/v1/chat/completions", json=big)
        assert declared.status_code == 413 and declared.json()["error"]["code"] == "body_too_large"

        def chunks():
            for _ in range(4):
                yield b" " * 800  # no Content-Length: counted as it arrives
        chunked = small.post("/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"})
        assert chunked.status_code == 413
        assert post(small, max_tokens=4).status_code == 200  # a body under the limit is read as before


def test_tenants_reuse_only_their_own_caches_by_api_key_and_by_cache_salt():
    pair = tiny_random_pair(seed=0)  # a pool of its own
    chat = AsymSpecChat(AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer))
    body = {"model": "tiny", "max_tokens": 4, "messages": [
        {"role": "user", "content": "A long shared prompt about tenants and their caches. " * 4}]}

    def cached(app, key, **extra):
        reply = app.post("/v1/chat/completions", json={**body, **extra}, headers={"Authorization": f"Bearer {key}"})
        assert reply.status_code == 200, reply.text
        return reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"]

    with TestClient(create_app(chat, model_name="tiny", api_keys=("tenant-a", "tenant-b"))) as app:
        assert cached(app, "tenant-a") == 0
        assert cached(app, "tenant-a") > 0  # its own prompt again: read from its cache
        assert cached(app, "tenant-b") == 0  # the same prompt from another key: nothing of A's shows
        assert cached(app, "tenant-b") > 0
        assert cached(app, "tenant-a", cache_salt="s1") == 0  # a salt scopes further, within a key
        assert cached(app, "tenant-a", cache_salt="s1") > 0
        assert cached(app, "tenant-a") > 0  # and A keeps its unsalted reuse
