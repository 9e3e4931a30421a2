"""`asymspec serve` when things go wrong, with real processes on 127.0.0.1: a client that goes away mid-stream, a
SIGTERM while replies are in progress, and a conversation too big for the cache pool's budget."""

import json
import signal
import threading
import time

import pytest

httpx = pytest.importorskip("httpx")
from asymspec_agents import testing  # noqa: E402
from asymspec_agents.server.process import ServerProcess  # noqa: E402

pytestmark = pytest.mark.integration
QUESTION = [{"role": "user", "content": "Tell me a short story about a lighthouse keeper and a storm."}]


def post(server, messages, **body) -> dict:
    response = httpx.post(server.base_url + "/chat/completions", timeout=120,
                          json={"model": "asymspec", "messages": messages, **body})
    assert response.status_code == 200, response.text
    return response.json()


def wait_for(condition, seconds: float = 60.0) -> bool:
    return testing.wait_for(condition, seconds, every=0.2)


def test_a_client_gone_mid_stream_frees_its_slot_and_its_conversation_goes_on_from_its_cache():
    with ServerProcess(["--max-queue", "1", "--max-new-tokens", "48", "--log-level", "warning"]) as server:
        first = post(server, QUESTION)
        turn = [*QUESTION, first["choices"][0]["message"], {"role": "user", "content": "Make it shorter."}]
        whole = post(server, turn)
        with httpx.stream("POST", server.base_url + "/chat/completions", timeout=120,
                          json={"model": "asymspec", "messages": turn, "stream": True}) as stream:
            chunks = [line for line, _ in zip(stream.iter_lines(), range(4))]  # a few chunks, then away
        assert any(line.startswith("data: ") for line in chunks)
        assert wait_for(lambda: server.health()["admitted"] == 0), server.health()  # the one slot is free again
        again = post(server, turn)  # admitted (not a 503), from the cache the cancelled reply left behind
        assert again["choices"][0]["message"] == whole["choices"][0]["message"]
        assert again["asymspec"]["cache"] == "continued"
        next_turn = [*turn, again["choices"][0]["message"], {"role": "user", "content": "Thanks."}]
        later = post(server, next_turn)
        assert later["asymspec"]["cache"] == "continued"
        new_tokens = later["asymspec"]["full_input_tokens"] - again["asymspec"]["full_input_tokens"]
        assert later["asymspec"]["prefilled_tokens"]["S_full"] <= new_tokens + 1  # only what the turn added
    assert server.returncode == 0 and "Traceback" not in server.log(), server.log()[-3000:]


def test_sigterm_lets_the_replies_in_progress_finish_and_exits_0():
    with ServerProcess(["--max-new-tokens", "48", "--log-level", "warning"]) as server:
        results: list = [None, None]

        def ask(i: int) -> None:
            try:
                response = httpx.post(server.base_url + "/chat/completions", timeout=120, json={
                    "model": "asymspec", "messages": [{"role": "user", "content": f"Count to {5 + i}."}]})
                results[i] = (response.status_code, response.json())
            except httpx.HTTPError as exc:
                results[i] = exc

        clients = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
        for client in clients:
            client.start()
        assert wait_for(lambda: server.health()["admitted"] == 2, 30), server.health()
        server.process.send_signal(signal.SIGTERM)
        for client in clients:
            client.join(timeout=120)
        assert server.process.wait(timeout=90) == 0, server.log()[-3000:]
    for result in results:  # each finished, or was refused as the server stopped: none was cut off
        assert isinstance(result, tuple), result
        status, body = result
        assert (status == 200 and body["choices"][0]["finish_reason"] in ("stop", "length")) or status == 503, body
    assert sum(status == 200 for status, _ in results) >= 1  # the drain let replies already running finish
    with pytest.raises(httpx.ConnectError):  # and then the server is gone
        httpx.get(server.base_url + "/models", timeout=5)


def test_a_conversation_bigger_than_the_kv_budget_evicts_the_others_never_itself_and_never_fails():
    from asymspec_agents.bench.common import pydoc_text

    budget_gib = 0.02  # ~20 MiB: two short conversations fit, the long one alone does not
    with ServerProcess(["--kv-budget-gib", str(budget_gib), "--max-new-tokens", "8", "--log-level", "warning"]) as server:
        small = [[{"role": "user", "content": f"Name a {thing}."}] for thing in ("colour", "river")]
        for messages in small:
            post(server, messages)
        assert server.health()["cache_pool"]["sets"] == 2
        assert server.health()["cache_pool"]["evictions"] == 0
        long = [{"role": "user", "content": pydoc_text()[:6000] + "\n\nWhich statement is described first?"}]
        reply = post(server, long)  # its caches alone exceed the budget: it is still served
        pool = server.health()["cache_pool"]
        assert pool["evictions"] == 2 and pool["sets"] == 1 and pool["kv_bytes"] > pool["budget_bytes"], pool
        follow = post(server, [*long, reply["choices"][0]["message"], {"role": "user", "content": "And the second?"}])
        assert follow["asymspec"]["cache"] == "continued"  # the set in use was kept
        evicted = post(server, [*small[0], {"role": "assistant", "content": "Blue."},
                                {"role": "user", "content": "Another?"}])
        assert evicted["asymspec"]["cache"] != "continued"  # read afresh, served all the same
        assert json.dumps(evicted["choices"][0]["message"])
    assert server.returncode == 0 and "Traceback" not in server.log(), server.log()[-3000:]


def test_three_clients_never_hold_more_kv_than_the_budget_or_one_conversations_caches():
    """The budget holds during calls: a call that would pass it beside the calls in progress waits for room."""
    from prometheus_client.parser import text_string_to_metric_families

    from asymspec_agents.bench.common import pydoc_text

    text = pydoc_text()
    documents = [text[i * 2500:(i + 1) * 2500] for i in range(3)]  # ~600 tokens each, different
    samples, done = [], threading.Event()
    with ServerProcess(["--kv-budget-gib", "0.04", "--max-new-tokens", "16", "--log-level", "warning"]) as server:
        def scrape() -> None:
            while not done.is_set():
                metrics = httpx.get(server.base_url.removesuffix("/v1") + "/metrics", timeout=10).text
                samples.append({s.name: s.value for family in text_string_to_metric_families(metrics)
                                for s in family.samples if not s.labels})
                time.sleep(0.05)

        def converse(document: str) -> None:
            messages = [{"role": "user", "content": document + "\n\nWhat is this text about?"}]
            for follow_up in ("Name one term it defines.", "Say it in five words."):
                messages += [post(server, messages)["choices"][0]["message"], {"role": "user", "content": follow_up}]
            post(server, messages)

        scraper = threading.Thread(target=scrape)
        scraper.start()
        clients = [threading.Thread(target=converse, args=(document,)) for document in documents]
        for client in clients:
            client.start()
        for client in clients:
            client.join(timeout=600)
        done.set()
        scraper.join(timeout=30)
        assert not any(client.is_alive() for client in clients)
        assert server.health()["cache_pool"]["calls"] == 9
    budget = samples[0]["asymspec:kv_cache_budget_bytes"]
    held = [(s["asymspec:kv_cache_bytes"], s["asymspec:kv_cache_largest_set_bytes"]) for s in samples]
    assert len(held) > 20 and max(kv for kv, _ in held) > budget / 2, held  # the run filled the budget
    assert all(kv <= max(budget, largest) for kv, largest in held), [h for h in held if h[0] > budget]
    assert max(s["asymspec:num_requests_waiting"] for s in samples) >= 1  # calls did wait for room
    assert server.returncode == 0 and "Traceback" not in server.log(), server.log()[-3000:]


def test_a_reply_past_the_request_timeout_is_a_504_and_its_conversation_goes_on_unchanged():
    counting = [{"role": "user", "content": "Count from 1 to 500, one number per line."}]  # minutes (raw model)
    with ServerProcess(["--verifier", "bundled", "--request-timeout", "3", "--log-level", "warning"]) as server:
        short = post(server, counting, max_tokens=6)["choices"][0]["message"]
        started = time.monotonic()
        response = httpx.post(server.base_url + "/chat/completions", timeout=120,
                              json={"model": "asymspec", "messages": counting, "max_tokens": 2000})
        assert response.status_code == 504 and response.json()["error"]["code"] == "request_timeout", response.text
        assert "--request-timeout" in response.json()["error"]["message"]
        assert time.monotonic() - started < 30  # stopped at its next block, not after 2000 tokens
        with httpx.stream("POST", server.base_url + "/chat/completions", timeout=120,
                          json={"model": "asymspec", "messages": counting, "max_tokens": 2000, "stream": True}) as s:
            events = [line for line in s.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and '"request_timeout"' in events[-2], events[-3:]
        assert wait_for(lambda: server.health()["admitted"] == 0), server.health()
        again = post(server, counting, max_tokens=6)  # the conversation reads as before the timeouts
        assert again["choices"][0]["message"] == short
    assert server.returncode == 0 and "Traceback" not in server.log(), server.log()[-3000:]
