"""A bounded soak of `asymspec serve` on 127.0.0.1: clients that keep talking for minutes, then a check.

Each client holds one agent conversation at a time: a forced search call per step (its ~300-token result
appended), an answer after `--turns` steps, then a new conversation. Requests alternate between JSON and streamed
replies; every `--cancel-every`th streamed request is dropped after its first chunks (the client went away), and
every `--bad-every`th request is a malformed one that must get a 4xx with the error body. Every `--sample-every`
seconds the server's resident memory (/proc) and its cache pool's bytes (GET /health) are read.

The server holds one API key per tenant (`--tenants`, default 2); client i speaks for tenant i mod tenants. Clients
start one after another, each once as many replies as clients before it have completed, so that every tenant's
first request comes when another tenant's system prompt and tools (the same text) are cached: it must read them
afresh (cache "fresh", no cached tokens), and a tenant's later requests still reuse their own caches.

At the end a sample of the completed requests is sent again, one at a time on an idle server: each reply must equal
the one given under load (greedy decoding; a conversation's own caches make it so, see engine/pool.py).
Unexplained errors are those that are neither the expected 4xx of a malformed request nor a cancellation.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from collections import Counter
from pathlib import Path

import torch
from tqdm import tqdm

from ..models import AUTO, DEFAULT_VERIFIER, resolve_pair
from ..plotting import pyplot
from .common import RESULTS, markdown_table, percentile, pydoc_text, write_json, write_report
from .serve import AGENT_QUESTION, SEARCH, SYSTEM

BAD_REQUESTS = (  # what a broken client sends; each must get a 4xx that says what was wrong
    {"messages": []},
    {"messages": [{"role": "tool", "tool_call_id": "nobody", "content": "x"}]},
    {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": ""}}]},
    {"messages": [{"role": "user", "content": "hi"}], "asymspec": {"gamma": 7}},
    {"messages": [{"role": "user", "content": "hi"}], "model": "gpt-4"},
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec bench soak", description=__doc__)
    parser.add_argument("--verifier", default=DEFAULT_VERIFIER)
    parser.add_argument("--drafter", default=AUTO, help="default: auto (the verifier's matched drafter)")
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the clients talk (default 10)")
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--turns", type=int, default=4, help="steps per conversation, the answer included")
    parser.add_argument("--max-tokens", type=int, default=24, help="tokens per reply")
    parser.add_argument("--kv-budget-gib", type=float, default=0.03,
                        help="the server's cache-pool budget: small, so that eviction runs (default 0.03: 31 MiB)")
    parser.add_argument("--cancel-every", type=int, default=5, help="drop every Nth streamed request early")
    parser.add_argument("--bad-every", type=int, default=7, help="send a malformed request every Nth request")
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds between memory readings")
    parser.add_argument("--replay", type=int, default=12, help="completed requests sent again alone at the end")
    parser.add_argument("--tenants", type=int, default=2, help="API keys, one per tenant (default 2)")
    parser.add_argument("--out", default=str(RESULTS / "soak"), help=f"output prefix (default {RESULTS / 'soak'})")
    args = parser.parse_args(argv)
    from ..server.process import ServerProcess

    threads = torch.get_num_threads()
    server_args = ["--verifier", args.verifier, "--drafter", args.drafter, "--max-new-tokens", str(args.max_tokens),
                   "--kv-budget-gib", str(args.kv_budget_gib), "--max-queue", str(2 * args.clients),
                   "--log-level", "warning", *[f"--api-key={key}" for key in tenant_keys(args.tenants)]]
    with ServerProcess(server_args, threads=threads) as server:
        soak = Soak(server, args)
        soak.run()
        replays = soak.replay(args.replay)
        stopped = server.stop()
    verifier, drafter = resolve_pair(args.verifier, args.drafter)
    report = {"verifier": verifier, "drafter": drafter, "threads": threads, "date": time.strftime("%Y-%m-%d"),
              "minutes": args.minutes, "clients": args.clients, "tenants": args.tenants, "turns": args.turns,
              "max_tokens": args.max_tokens,
              "kv_budget_bytes": int(args.kv_budget_gib * (1 << 30)),
              "requests": [{k: v for k, v in r.items() if k != "exchange"} for r in soak.records],
              "samples": soak.samples, "replays": replays, "server_exit": stopped,
              "server_tracebacks": server.log().count("Traceback")}
    write_outputs(report, args.out)
    print(Path(args.out + ".md").read_text())
    return 0 if not unexplained(report) and not cross_tenant_hits(report) and all(r["equal"] for r in replays) else 1


def tenant_keys(tenants: int) -> list[str]:
    return [f"soak-tenant-{i}" for i in range(tenants)]


class Soak:
    def __init__(self, server, args: argparse.Namespace):
        import httpx

        self.server, self.args = server, args
        self.url = server.base_url + "/chat/completions"
        self.http = httpx.Client(timeout=600)
        self.records: list[dict] = []  # one per request: when, how, status, seconds, and for replays the exchange
        self.samples: list[dict] = []  # memory over time
        self.documents = _documents(200)
        self.keys = tenant_keys(args.tenants)
        self._lock = threading.Lock()
        self._count = 0
        self._completed = threading.Condition(self._lock)  # replies completed so far: when the next client starts

    def run(self) -> None:
        self.started = time.monotonic()
        self.deadline = self.started + 60 * self.args.minutes
        workers = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(self.args.clients)]
        for worker in workers:
            worker.start()
        with tqdm(total=round(60 * self.args.minutes), desc="soak", unit="s") as bar:
            while any(worker.is_alive() for worker in workers):
                self._sample()
                for worker in workers:
                    worker.join(timeout=max(0.0, self.args.sample_every / len(workers)))
                bar.n = min(bar.total, round(time.monotonic() - self.started))
                bar.set_postfix(requests=len(self.records), refresh=False)
                bar.refresh()
        self._sample()

    def replay(self, count: int) -> list[dict]:
        """A sample of completed requests sent again one at a time; whether each reply equals the one under load."""
        done = [r for r in self.records if r.get("exchange")]
        chosen = random.Random(0).sample(done, min(count, len(done)))
        out = []
        for record in tqdm(chosen, desc="replay alone", unit="request"):
            body, then = record["exchange"]
            reply = self.http.post(self.url, json=body, headers=self._auth(record["tenant"])).json()
            now = _said(reply["choices"][0]["message"])
            out.append({"at": record["at"], "equal": now == then, "under_load": then, "alone": now})
        return out

    # -- a client ----------------------------------------------------------------------------------------------

    def _client(self, index: int) -> None:
        rng = random.Random(index)
        tenant = index % self.args.tenants
        with self._completed:  # start once `index` replies have completed (their caches are in the pool)
            self._completed.wait_for(lambda: self._replies() >= index,
                                     timeout=max(0.0, self.deadline - time.monotonic()))
        first = True
        while time.monotonic() < self.deadline:
            document = rng.choice(self.documents)
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": AGENT_QUESTION}]
            for step in range(self.args.turns):
                if time.monotonic() >= self.deadline:
                    return
                n = self._next()
                if n % self.args.bad_every == 0:
                    self._bad(n)
                body = {"model": "asymspec", "messages": list(messages), "tools": [SEARCH],
                        "tool_choice": "required" if step < self.args.turns - 1 else "none",
                        "parallel_tool_calls": False}
                streamed = n % 2 == 1 and not first  # a client's first request is answered whole
                cancel = streamed and (n // 2) % self.args.cancel_every == 0
                message = self._send(body, streamed, cancel, tenant)
                first = False
                if message is None:  # cancelled or failed: this conversation ends here
                    break
                messages.append(message)
                messages += [{"role": "tool", "tool_call_id": call["id"], "content": document}
                             for call in message.get("tool_calls") or []]

    def _next(self) -> int:
        with self._lock:
            self._count += 1
            return self._count

    def _replies(self) -> int:
        return sum(r["kind"] in ("json", "stream") and r.get("status") == 200 for r in self.records)

    def _auth(self, tenant: int) -> dict:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    def _send(self, body: dict, streamed: bool, cancel: bool, tenant: int) -> dict | None:
        """One request; its record; the assistant message to append (None when cancelled or failed)."""
        kind = "cancelled" if cancel else "stream" if streamed else "json"
        started = time.monotonic()
        record = {"at": started - self.started, "kind": kind, "tenant": tenant}
        try:
            if streamed:
                message, status, reply = self._stream(body, cancel, tenant)
            else:
                response = self.http.post(self.url, json=body, headers=self._auth(tenant))
                status = response.status_code
                reply = response.json() if status == 200 else None
                message = reply["choices"][0]["message"] if reply else None
            record["status"] = status
            if reply and "usage" in reply:  # what the pool served it from
                record["cache"] = reply["asymspec"]["cache"]
                record["cached_tokens"] = reply["usage"]["prompt_tokens_details"]["cached_tokens"]
        except Exception as exc:  # counted; the client starts a new conversation
            message, record["status"], record["error"] = None, None, f"{type(exc).__name__}: {exc}"[:200]
        record["seconds"] = time.monotonic() - started
        if message is not None:
            record["exchange"] = (body, _said(message))
        with self._completed:
            self.records.append(record)
            self._completed.notify_all()
        return None if cancel else message

    def _stream(self, body: dict, cancel: bool, tenant: int) -> tuple[dict | None, int, dict | None]:
        """(the assistant message, the status, the usage chunk) of a streamed request."""
        content, calls, usage = [], {}, None
        with self.http.stream("POST", self.url, headers=self._auth(tenant),
                              json={**body, "stream": True, "stream_options": {"include_usage": True}}) as response:
            if response.status_code != 200:
                response.read()
                return None, response.status_code, None
            for i, line in enumerate(response.iter_lines()):
                if cancel and i >= 3:  # a few chunks, then the client goes away
                    return None, 200, None
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise RuntimeError(f"error in stream: {chunk['error']}")
                usage = chunk if "usage" in chunk else usage
                delta = chunk["choices"][0]["delta"] if chunk.get("choices") else {}
                content.append(delta.get("content") or "")
                for call in delta.get("tool_calls") or []:
                    calls[call["index"]] = call
        message = {"role": "assistant", "content": "".join(content) or None}
        if calls:
            message["tool_calls"] = [{"id": c["id"], "type": "function", "function": c["function"]}
                                     for _, c in sorted(calls.items())]
        return message, 200, usage

    def _bad(self, n: int) -> None:
        bad = BAD_REQUESTS[(n // self.args.bad_every) % len(BAD_REQUESTS)]
        started = time.monotonic()
        record = {"at": started - self.started, "kind": "bad"}
        try:
            response = self.http.post(self.url, json={"model": "asymspec", **bad}, headers=self._auth(0))
            record["status"] = response.status_code
            record["says_why"] = bool((response.json().get("error") or {}).get("message"))
        except Exception as exc:
            record["status"], record["error"] = None, f"{type(exc).__name__}: {exc}"[:200]
        record["seconds"] = time.monotonic() - started
        with self._completed:
            self.records.append(record)

    def _sample(self) -> None:
        try:
            pool = self.server.health()["cache_pool"]
        except Exception as exc:  # a server too busy to answer /health in time is itself worth a note
            pool = {"kv_bytes": None, "sets": None, "evictions": None, "error": repr(exc)[:120]}
        self.samples.append({"at": time.monotonic() - self.started, "rss_bytes": _rss(self.server.process.pid),
                             "kv_bytes": pool["kv_bytes"], "sets": pool["sets"], "evictions": pool["evictions"]})


def _said(message: dict) -> dict:
    """What an assistant message says: its text and its calls (names and arguments; ids differ between requests)."""
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    return {"content": message.get("content") or "", "tool_calls": calls}


def _rss(pid: int) -> int | None:
    """Resident memory of a process, in bytes (Linux's /proc)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _documents(count: int, chars: int = 1200) -> list[str]:
    """~300-token passages of Python's reference documentation."""
    text = pydoc_text()
    return [text[i * chars:(i + 1) * chars] for i in range(count)]


def unexplained(report: dict) -> list[dict]:
    """Requests that failed for no reason of their own: valid ones that did not get a 200, malformed ones that
    did not get a 4xx with an error message."""
    wrong = []
    for r in report["requests"]:
        if r["kind"] == "bad":
            if r.get("status") is None or not 400 <= r["status"] < 500 or not r.get("says_why"):
                wrong.append(r)
        elif r.get("status") != 200:
            wrong.append(r)
    return wrong


def cross_tenant_hits(report: dict) -> list[dict]:
    """Each tenant's first request that completed with cache numbers, where it reused anything: it came when only
    other tenants' caches held the shared system prompt and tools, so any reuse was theirs."""
    hits = []
    for tenant in range(report.get("tenants", 1)):
        own = sorted((r for r in report["requests"] if r.get("tenant") == tenant and "cache" in r),
                     key=lambda r: r["at"])
        if own and (own[0]["cache"] != "fresh" or own[0]["cached_tokens"]):
            hits.append(own[0])
    return hits


def own_reuse(report: dict) -> tuple[int, int]:
    """(requests that read cached tokens, requests with cache numbers): a tenant still reuses its own caches."""
    served = [r for r in report["requests"] if "cache" in r]
    return sum(r["cached_tokens"] > 0 for r in served), len(served)


def minutes(report: dict) -> list[dict]:
    """Per minute of the run: requests, latency of the completed valid ones, errors, memory at its end."""
    rows = []
    for m in range(max(1, int(-(-report["minutes"] // 1)))):
        inside = [r for r in report["requests"] if m * 60 <= r["at"] < (m + 1) * 60]
        valid = [r["seconds"] for r in inside if r["kind"] in ("json", "stream") and r.get("status") == 200]
        kinds = Counter(r["kind"] for r in inside)
        samples = [s for s in report["samples"] if s["at"] < (m + 1) * 60] or report["samples"][:1]
        last = samples[-1] if samples else {}
        rows.append({"minute": m + 1, "requests": len(inside), "completed": len(valid),
                     "p50": percentile(valid, 0.5), "p95": percentile(valid, 0.95),
                     "cancelled": kinds["cancelled"], "bad": kinds["bad"],
                     "unexplained": len(unexplained({"requests": inside})),
                     "rss_mib": (last.get("rss_bytes") or 0) / (1 << 20), "kv_mib": (last.get("kv_bytes") or 0) / (1 << 20)})
    return rows


def write_outputs(report: dict, prefix: str) -> None:
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    write_json(Path(prefix + ".json"), report)
    rows = [[r["minute"], r["requests"], r["completed"], f"{r['p50']:.2f}", f"{r['p95']:.2f}", r["cancelled"],
             r["bad"], r["unexplained"], f"{r['rss_mib']:.0f}", f"{r['kv_mib']:.0f}"] for r in minutes(report)]
    wrong = unexplained(report)
    errors = Counter(r.get("error", "").split(":")[0] or f"status {r.get('status')}" for r in wrong)
    equal = sum(r["equal"] for r in report["replays"])
    rss = [s["rss_bytes"] for s in report["samples"] if s["rss_bytes"]]
    kv = [s["kv_bytes"] for s in report["samples"] if s["kv_bytes"] is not None]
    text = (f"# Soak: {report['clients']} clients for {report['minutes']:g} minutes ({report['date']}, "
            f"`{report['verifier']}` verifying, `{report['drafter']}` drafting, {report['threads']} torch threads)\n\n"
            f"Each client: agent conversations of {report['turns']} steps ({report['max_tokens']} tokens per reply), "
            "JSON and streamed replies in turn, some streams dropped after their first chunks, malformed requests "
            f"mixed in; the cache pool's budget {report['kv_budget_bytes'] / (1 << 20):.0f} MiB. Latency of the "
            "completed valid requests; memory at the end of each minute.\n\n"
            + markdown_table(["min", "requests", "done", "p50 s", "p95 s", "dropped", "bad", "unexplained",
                              "RSS MiB", "KV MiB"], rows)
            + f"\n- {len(report['requests'])} requests, {len(wrong)} unexplained"
            + (f" ({dict(errors)})" if errors else "") + f"; the server logged {report['server_tracebacks']} "
            f"tracebacks and exited with {report['server_exit']}.\n"
            f"- Memory: RSS {min(rss, default=0) / (1 << 20):.0f}–{max(rss, default=0) / (1 << 20):.0f} MiB; "
            f"the pool's KV at most {max(kv, default=0) / (1 << 20):.0f} MiB "
            f"(budget {report['kv_budget_bytes'] / (1 << 20):.0f} MiB: calls wait for room, one conversation alone "
            "may pass it); "
            f"{max((s['evictions'] or 0 for s in report['samples']), default=0)} conversations' caches evicted.\n"
            f"- Sent again alone on the idle server: {equal}/{len(report['replays'])} replies equal.\n"
            + _tenancy(report))
    write_report(prefix + ".md", text, lambda: plot(report, prefix + ".png"))


def _tenancy(report: dict) -> str:
    tenants = report.get("tenants", 1)
    if tenants < 2:
        return ""
    reused, served = own_reuse(report)
    hits = cross_tenant_hits(report)
    return (f"- {tenants} tenants (one API key each): {len(hits)} cross-tenant cache hits (each tenant's first "
            "request, sent while other tenants' caches held the same system prompt and tools, read them afresh: "
            f"cache fresh, 0 cached tokens{'' if not hits else '; not so for ' + str([h['tenant'] for h in hits])}); "
            f"{reused} of {served} requests read cached tokens of their own tenant.\n")


def plot(report: dict, path: str) -> None:
    plt = pyplot()
    fig, (latency, memory) = plt.subplots(1, 2, figsize=(9, 3.6))
    done = [r for r in report["requests"] if r["kind"] in ("json", "stream") and r.get("status") == 200]
    latency.scatter([r["at"] / 60 for r in done], [r["seconds"] for r in done], s=6, alpha=0.5, label="a request")
    rows = minutes(report)
    latency.plot([r["minute"] - 0.5 for r in rows], [r["p50"] for r in rows], "-o", label="p50 per minute")
    latency.plot([r["minute"] - 0.5 for r in rows], [r["p95"] for r in rows], "--s", label="p95 per minute")
    latency.set_title("latency per request (s)")
    samples = [s for s in report["samples"] if s["rss_bytes"]]
    memory.plot([s["at"] / 60 for s in samples], [s["rss_bytes"] / (1 << 20) for s in samples], label="server RSS")
    memory.plot([s["at"] / 60 for s in samples], [(s["kv_bytes"] or 0) / (1 << 20) for s in samples],
                label="cache pool KV")
    memory.axhline(report["kv_budget_bytes"] / (1 << 20), color="grey", linestyle=":", label="KV budget")
    memory.set_title("memory (MiB)")
    for ax in (latency, memory):
        ax.set_xlabel("minutes")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
