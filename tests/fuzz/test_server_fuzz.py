"""`asymspec serve` under schemathesis: requests generated from the server's own OpenAPI document (FastAPI's), sent
to a real process on 127.0.0.1 started with an API key. No response may be a 5xx, and every 4xx carries the
project's error body (`{"error": {"message": ...}}`) with a message. Every fourth request goes without the key or
with a wrong one: on a `/v1/*` route that is a 401, whatever the body. `make fuzz` runs FUZZ_EXAMPLES (default 40
here) per operation.
"""

import itertools
import os
from collections import Counter

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from asymspec_agents.server.process import ServerProcess  # noqa: E402

pytestmark = pytest.mark.integration
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
SENT: Counter = Counter()  # status classes of every request sent, reported at the end
REFUSALS: Counter = Counter()  # the 4xx by status and the start of their message
KEY = "fuzz-key-0123"
CREDENTIALS = itertools.cycle([credential for wrong in (None, "Bearer wrong", f"Basic {KEY}")
                               for credential in [f"Bearer {KEY}"] * 3 + [wrong]])


@pytest.fixture(scope="module")
def server():
    with ServerProcess(["--max-new-tokens", "8", "--log-level", "warning", "--api-key", KEY]) as server:
        yield server
        print(f"\nfuzz: {sum(SENT.values())} requests, by status class: {dict(SENT)}; the 4xx most often:")
        for (status, message), count in REFUSALS.most_common(8):
            print(f"  {count:4d} x {status} {message}")
    assert server.returncode == 0, server.log()[-3000:]
    assert "Traceback" not in server.log(), server.log()[-3000:]


@pytest.fixture(scope="module")
def api_schema(server):
    return schemathesis.openapi.from_url(server.base_url.removesuffix("/v1") + "/openapi.json")


def test_no_5xx_and_every_4xx_says_what_was_wrong(api_schema):
    operations = [result.ok() for result in api_schema.get_all_operations()]
    routes = {f"{op.method.upper()} {op.path}" for op in operations}
    assert routes >= {"POST /v1/chat/completions", "POST /v1/completions", "GET /health"}, routes
    for operation in operations:
        check_operation(operation)
    assert SENT["5xx"] == 0


def check_operation(operation) -> None:
    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case):
        bound_reply_length(case.body)
        credential = next(CREDENTIALS)
        response = case.call(timeout=120, headers={"Authorization": credential} if credential else {})
        SENT[f"{response.status_code // 100}xx"] += 1
        assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
        if case.path.startswith("/v1/") and credential != f"Bearer {KEY}":
            assert response.status_code == 401, (credential, case.path, response.text[:300])
        if response.status_code >= 400:
            error = response.json().get("error")
            assert isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"], response.text
            REFUSALS[response.status_code, error["message"][:60]] += 1

    run()


def bound_reply_length(body) -> None:
    """A valid max_tokens is cut to 16: a reply of thousands of tokens is a legal request that takes minutes here,
    not a fault (the engine stops at the window). Valid is what the request model takes as an int (53886.0 and
    "53886" too); invalid values (0, negative, 2.5, not a number) go as generated."""
    if isinstance(body, dict):
        for name in ("max_tokens", "max_completion_tokens"):
            value = body.get(name)
            try:
                number = float(value) if isinstance(value, (int, float, str)) and not isinstance(value, bool) else 0
            except ValueError:
                continue
            if number > 16 and number.is_integer():
                body[name] = 16
