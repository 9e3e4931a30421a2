"""`asymspec bench soak`'s accounting: which requests count as unexplained, the per-minute rows, the report."""

from asymspec_agents.bench import soak


def record(at, kind, status=200, **extra):
    return {"at": at, "kind": kind, "status": status, "seconds": 1.0 + at / 100, **extra}


def report(requests, samples=None):
    return {"verifier": "bundled", "drafter": "bundled-small", "threads": 1, "date": "2026-12-04", "minutes": 2,
            "clients": 2, "turns": 4, "max_tokens": 24, "kv_budget_bytes": 32 << 20, "requests": requests,
            "samples": samples or [{"at": 0, "rss_bytes": 100 << 20, "kv_bytes": 0, "sets": 0, "evictions": 0},
                                   {"at": 90, "rss_bytes": 120 << 20, "kv_bytes": 40 << 20, "sets": 2, "evictions": 3}],
            "replays": [{"at": 5, "equal": True}, {"at": 70, "equal": False}], "server_exit": 0, "server_tracebacks": 0}


def test_unexplained_are_failed_valid_requests_and_bad_ones_without_a_4xx_that_says_why():
    requests = [record(1, "json"), record(2, "stream"), record(3, "cancelled"),
                record(4, "bad", 400, says_why=True),
                record(5, "json", 503), record(6, "stream", None, error="ReadTimeout: x"),
                record(7, "bad", 500, says_why=True), record(8, "bad", 404, says_why=False)]
    assert [r["at"] for r in soak.unexplained({"requests": requests})] == [5, 6, 7, 8]


def test_minutes_split_the_run_and_take_latency_of_completed_valid_requests_only(tmp_path):
    requests = [record(10, "json"), record(20, "stream"), record(30, "bad", 400, says_why=True),
                record(70, "json", 503), record(80, "cancelled")]
    first, second = soak.minutes(report(requests))
    assert (first["requests"], first["completed"], first["bad"], first["unexplained"]) == (3, 2, 1, 0)
    assert (second["requests"], second["completed"], second["cancelled"], second["unexplained"]) == (2, 0, 1, 1)
    assert first["rss_mib"] == 100 and second["kv_mib"] == 40
    soak.write_outputs(report(requests), str(tmp_path / "soak"))
    text = (tmp_path / "soak.md").read_text()
    assert "5 requests, 1 unexplained" in text and "1/2 replies equal" in text and "3 conversations' caches" in text
    assert (tmp_path / "soak.json").exists()


def test_a_tenants_first_request_that_reused_anything_is_a_cross_tenant_hit(tmp_path):
    requests = [record(1, "json", tenant=0, cache="fresh", cached_tokens=0),
                record(2, "json", tenant=1, cache="fresh", cached_tokens=0),
                record(3, "stream", tenant=0, cache="continued", cached_tokens=300),
                record(4, "cancelled", tenant=1),
                record(5, "json", tenant=1, cache="branched", cached_tokens=120)]
    clean = {**report(requests), "tenants": 2}
    assert soak.cross_tenant_hits(clean) == [] and soak.own_reuse(clean) == (2, 4)
    soak.write_outputs(clean, str(tmp_path / "soak"))
    assert "2 tenants (one API key each): 0 cross-tenant cache hits" in (tmp_path / "soak.md").read_text()
    leaked = {**clean, "requests": [requests[0], {**requests[1], "cache": "branched", "cached_tokens": 250}]}
    assert [r["at"] for r in soak.cross_tenant_hits(leaked)] == [2]
    fresh_but_cached = {**clean, "requests": [requests[0], {**requests[1], "cached_tokens": 7}]}
    assert [r["tenant"] for r in soak.cross_tenant_hits(fresh_but_cached)] == [1]
