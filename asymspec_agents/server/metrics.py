"""What `asymspec serve` exposes at `GET /metrics`, in Prometheus' text format (prometheus-client).

Names follow vLLM's where the meaning is the same (`asymspec:` for `vllm:`): requests by route and status, seconds
to the first token and per reply, tokens in (the verifier's compressed view; the drafter's full view apart) and
out, speculative blocks, drafted and accepted tokens, requests admitted and those waiting for room in the KV budget,
the cache pool (KV bytes held against its budget, sets, calls by outcome, evictions) read at each scrape, and for
models on servers the requests sent to them and the seconds waited, by role.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)


class ServerMetrics:
    """One server's metrics, in a registry of their own (two apps in one process count apart)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, pool_stats: Callable, admitted: Callable[[], int]):
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("asymspec:requests", "HTTP requests by route and status code.", ["route", "status"],
                                registry=registry)
        self.first_token = Histogram("asymspec:time_to_first_token_seconds", "Seconds from a completion request to "
                                     "its first decoded text.", buckets=LATENCY_BUCKETS, registry=registry)
        self.latency = Histogram("asymspec:e2e_request_latency_seconds", "Seconds from a completion request to its "
                                 "last token.", buckets=LATENCY_BUCKETS, registry=registry)
        self.prompt_tokens = Counter("asymspec:prompt_tokens", "Prompt tokens the verifier read (its compressed "
                                     "view).", registry=registry)
        self.full_prompt_tokens = Counter("asymspec:full_prompt_tokens", "Prompt tokens of the full view the "
                                          "drafter read.", registry=registry)
        self.generation_tokens = Counter("asymspec:generation_tokens", "Tokens generated.", registry=registry)
        self.drafts = Counter("asymspec:spec_decode_num_drafts", "Verification blocks.", registry=registry)
        self.draft_tokens = Counter("asymspec:spec_decode_num_draft_tokens", "Tokens the drafter proposed.",
                                    registry=registry)
        self.accepted_tokens = Counter("asymspec:spec_decode_num_accepted_tokens", "Proposed tokens the verifier "
                                       "accepted.", registry=registry)
        self.upstream_requests = Counter("asymspec:upstream_requests", "HTTP requests sent to a model's server "
                                         "(remote models), by the model's role.", ["role"], registry=registry)
        self.upstream_seconds = Counter("asymspec:upstream_request_seconds", "Seconds spent waiting on a model's "
                                        "server (remote models), by the model's role.", ["role"], registry=registry)
        registry.register(_PoolCollector(pool_stats, admitted))

    def request(self, route: str, status: int) -> None:
        self.requests.labels(route, str(status)).inc()

    def reply(self, reply, seconds: float) -> None:
        """A completed reply: its latency, tokens and speculation counts."""
        self.latency.observe(seconds)
        self.prompt_tokens.inc(reply.usage.input_tokens)
        self.full_prompt_tokens.inc(reply.usage.full_input_tokens)
        self.generation_tokens.inc(reply.usage.output_tokens)
        self.drafts.inc(reply.stats.blocks)
        self.draft_tokens.inc(reply.stats.drafted)
        self.accepted_tokens.inc(reply.stats.accepted)
        for stream in reply.stats.streams.values():
            if stream.requests:
                self.upstream_requests.labels(stream.role).inc(stream.requests)
                self.upstream_seconds.labels(stream.role).inc(stream.seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _PoolCollector:
    """The cache pool's and the admission queue's state, read when scraped."""

    def __init__(self, pool_stats: Callable, admitted: Callable[[], int]):
        self.pool_stats, self.admitted = pool_stats, admitted

    def collect(self):
        stats = self.pool_stats()
        yield GaugeMetricFamily("asymspec:num_requests_admitted", "Completion requests running or waiting.",
                                value=self.admitted())
        yield GaugeMetricFamily("asymspec:num_requests_waiting", "Completion requests waiting for room in the KV "
                                "budget.", value=stats.waiting)
        yield GaugeMetricFamily("asymspec:kv_cache_bytes", "KV cache the pool holds.", value=stats.kv_bytes)
        yield GaugeMetricFamily("asymspec:kv_cache_largest_set_bytes", "KV cache of the largest conversation.",
                                value=stats.largest_set_bytes)
        yield GaugeMetricFamily("asymspec:kv_cache_budget_bytes", "The pool's KV budget.", value=stats.budget_bytes)
        yield GaugeMetricFamily("asymspec:cache_sets", "Cache sets (one per conversation) in the pool.",
                                value=stats.sets)
        calls = CounterMetricFamily("asymspec:cache_pool_calls", "Calls by what the pool found: their own "
                                    "conversation's set, another set's shared prefix, or nothing.", labels=["outcome"])
        for outcome in ("continued", "branched", "fresh"):
            calls.add_metric([outcome], getattr(stats, outcome))
        yield calls
        yield CounterMetricFamily("asymspec:cache_evictions", "Cache sets evicted to keep the budget.",
                                  value=stats.evictions)
