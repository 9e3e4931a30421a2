"""`asymspec serve` as a real process on 127.0.0.1 with the bundled pair, driven by the `openai` client."""

import threading
import time

import pytest

openai = pytest.importorskip("openai")
from asymspec_agents.server.process import ServerProcess  # noqa: E402

pytestmark = pytest.mark.integration

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CLIENTS, TURNS = 8, 5
SUBJECTS = ["apples", "rivers", "trains", "violins", "glaciers", "owls", "copper", "tulips"]


@pytest.fixture(scope="module")
def server():
    with ServerProcess(["--max-new-tokens", "48", "--max-queue", str(CLIENTS)]) as server:
        yield server
    assert server.returncode == 0, server.log()
    assert "Traceback" not in server.log(), server.log()
    assert "SIGINT: draining" in server.log() and server.log().rstrip().endswith("stopped"), server.log()[-500:]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", timeout=120, max_retries=0)


def test_a_forced_tool_call_then_its_result_and_usage(client):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(model="asymspec", messages=messages, tools=[WEATHER],
                                           tool_choice="required", parallel_tool_calls=False)
    (call,) = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert "Paris" in call.function.arguments
    assert first.usage.prompt_tokens > 0 and first.model_extra["asymspec"]["full_input_tokens"] >= first.usage.prompt_tokens
    messages += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "Sunny and 21 degrees."}]
    second = client.chat.completions.create(model="asymspec", messages=messages, tools=[WEATHER])
    assert second.choices[0].message.content or second.choices[0].message.tool_calls
    assert second.model_extra["asymspec"]["cache"] == "continued"  # the same tools block: its own cache set


def test_streaming_gives_the_same_text_and_a_usage_chunk(client):
    messages = [{"role": "user", "content": "Name three colours."}]
    whole = client.chat.completions.create(model="asymspec", messages=messages, max_tokens=20)
    chunks = list(client.chat.completions.create(model="asymspec", messages=messages, max_tokens=20, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens


def test_completions_through_the_openai_client_and_langchains_openai_llm(client, server):
    prompt = "Question: What is the capital of France?\nAnswer: The capital of France is"  # a plain continuation
    whole = client.completions.create(model="asymspec", prompt=prompt, max_tokens=12)
    assert "Paris" in whole.choices[0].text and whole.usage.prompt_tokens > 0
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="asymspec", prompt=prompt, max_tokens=12, stream=True) if c.choices)
    assert streamed == whole.choices[0].text
    with pytest.raises(openai.BadRequestError, match="echo"):
        client.completions.create(model="asymspec", prompt=prompt, echo=True)
    langchain_openai = pytest.importorskip("langchain_openai")
    llm = langchain_openai.OpenAI(base_url=server.base_url, api_key="unused", model="asymspec", max_tokens=12,
                                  temperature=0, max_retries=0)
    assert llm.invoke(prompt) == whole.choices[0].text


def test_malformed_requests_get_4xx_with_a_message(client, server):
    with pytest.raises(openai.BadRequestError, match="unknown role"):
        client.chat.completions.create(model="asymspec", messages=[{"role": "wizard", "content": "hi"}])
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    import urllib.error
    import urllib.request

    request = urllib.request.Request(server.base_url + "/chat/completions", data=b"{not json",
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(request, timeout=10)
    assert error.value.code == 400 and b"not valid JSON" in error.value.read()


def test_eight_clients_with_growing_conversations_get_their_serial_replies(client, server):
    """Each client holds one conversation of five turns; run one at a time, then all at once: every reply equals
    its serial twin (a reply in the wrong conversation would not), within a time limit."""

    def converse(i: int, out: dict, deadline: float) -> None:
        messages, replies = [], []
        for turn in range(TURNS):
            if time.monotonic() > deadline:
                raise TimeoutError(f"client {i} ran out of time at turn {turn}")
            messages.append({"role": "user", "content": f"Tell me one short fact about {SUBJECTS[i]} (fact {turn + 1})."})
            reply = client.chat.completions.create(model="asymspec", messages=messages, max_tokens=12)
            content = reply.choices[0].message.content
            replies.append((content, reply.usage.prompt_tokens))
            messages.append({"role": "assistant", "content": content})
        out[i] = replies

    serial: dict = {}
    for i in range(CLIENTS):
        converse(i, serial, time.monotonic() + 300)
    together, errors = {}, []
    deadline = time.monotonic() + 600

    def run(i):
        try:
            converse(i, together, deadline)
        except Exception as exc:  # reported below with the client's number
            errors.append((i, repr(exc)))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(1.0, deadline - time.monotonic()))
    assert not errors and not any(t.is_alive() for t in threads), errors
    for i in range(CLIENTS):
        assert together[i] == serial[i], i
    pool = server.health()["cache_pool"]  # every turn after a conversation's first continued its own cache set
    assert pool["continued"] >= 2 * CLIENTS * (TURNS - 1) and pool["evictions"] == 0, pool


def test_a_burst_beyond_the_queue_gets_503_and_the_rest_are_answered(server):
    # a fresh client: twelve new connections, none left idle by the tests before
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", timeout=120, max_retries=0)
    answered, busy, other = [], [], []
    start = threading.Barrier(CLIENTS + 4)

    def ask(i):
        start.wait(timeout=30)
        try:
            reply = client.chat.completions.create(model="asymspec", max_tokens=16,
                                                   messages=[{"role": "user", "content": f"Count to {i + 3}."}])
            answered.append(reply.choices[0].message.content)
        except openai.APIStatusError as exc:
            (busy if exc.status_code == 503 else other).append(exc)
        except openai.APIError as exc:  # no answer at all: reported by the assertion below
            other.append(exc)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(CLIENTS + 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not other and len(answered) + len(busy) == CLIENTS + 4, other
    assert busy and answered and all("busy" in str(exc) for exc in busy)


def test_a_server_started_with_keys_answers_only_requests_bearing_one(monkeypatch):
    monkeypatch.setenv("ASYMSPEC_API_KEY", "from-the-environment")
    with ServerProcess(["--api-key", "from-the-flag", "--max-new-tokens", "4"]) as keyed:
        assert "2 API keys required" in keyed.log()
        for key in ("from-the-flag", "from-the-environment"):
            client = openai.OpenAI(base_url=keyed.base_url, api_key=key, timeout=120, max_retries=0)
            reply = client.chat.completions.create(model="asymspec", max_tokens=4,
                                                   messages=[{"role": "user", "content": "Say hi."}])
            assert reply.choices[0].message.content is not None
        wrong = openai.OpenAI(base_url=keyed.base_url, api_key="guess", timeout=120, max_retries=0)
        with pytest.raises(openai.AuthenticationError, match="Bearer"):
            wrong.models.list()
        assert keyed.health()["status"] == "ok"  # /health stays open
    assert keyed.returncode == 0
