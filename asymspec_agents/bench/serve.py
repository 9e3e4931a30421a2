"""Many conversations at once: latency and throughput at 1, 2, 4, 8 clients, in process and over HTTP.

Every client holds one conversation. Workload `chat`: a shared system prompt, a document of its own (~300 tokens of
Python's reference) in its first turn, then a question per turn; each reply is appended before the next turn.
Workload `agent`: a tool-calling agent; each step but the last must call a search tool (`tool_choice="required"`),
whose result (the client's document) and the call, as the OpenAI format returns it, are appended; the last step
answers (`tool_choice="none"`). Both transports send the same OpenAI-format messages: "in-process" clients are
threads calling one `AsymSpecChat` through the server's own translation (openai_format.py); "http" clients are
threads of the `openai` client against a real `asymspec serve` process on 127.0.0.1 with the same pair, settings
and torch threads. Both runs of one client count
are measured back to back. Latency is per request (send to complete reply); throughput is completion tokens per
second of the whole run; the hit rate is the share of calls the cache pool served from their conversation's own set.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import torch
from tqdm import tqdm

from ..models import AUTO, DEFAULT_VERIFIER, resolve_pair
from ..plotting import pyplot
from .common import RESULTS, markdown_table, median, percentile, pydoc_text, write_json, write_report

SYSTEM = "You are a concise assistant. Answer in one sentence."
AGENT_QUESTION = "Search the Python reference for the statement 'break', then say in one sentence what it does."
SEARCH = {"type": "function", "function": {
    "name": "search_python_docs", "description": "Search the Python language reference; returns a section.",
    "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
WORKLOADS = ("chat", "agent")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec bench serve", description=__doc__)
    parser.add_argument("--verifier", default=DEFAULT_VERIFIER)
    parser.add_argument("--drafter", default=AUTO, help="default: auto (the verifier's matched drafter)")
    parser.add_argument("--workload", choices=WORKLOADS, default="chat",
                        help="chat: questions about a document; agent: tool calls, their results, an answer")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--turns", type=int, default=3, help="turns per conversation")
    parser.add_argument("--max-tokens", type=int, default=24, help="tokens per reply")
    parser.add_argument("--out", help=f"output prefix (default {RESULTS / 'serve'}, {RESULTS / 'serve-agent'} for agents)")
    args = parser.parse_args(argv)
    args.out = args.out or str(RESULTS / ("serve" if args.workload == "chat" else "serve-agent"))
    from ..chat import AsymSpecChat
    from ..engine import AsymSpecEngine, GenerationConfig
    from ..server.process import ServerProcess

    config = GenerationConfig(max_new_tokens=args.max_tokens)
    chat = AsymSpecChat(AsymSpecEngine.from_pretrained(args.verifier, args.drafter), config=config)
    documents = _documents(chat.engine.tokenizer, max(args.clients) * 2 * len(args.clients))
    threads = torch.get_num_threads()
    server_args = ["--verifier", args.verifier, "--drafter", args.drafter, "--max-new-tokens", str(args.max_tokens)]
    runs, used = [], 0
    with ServerProcess(server_args, threads=threads) as server:
        import openai

        client = openai.OpenAI(base_url=server.base_url, api_key="unused", timeout=600, max_retries=0)
        for n in tqdm(args.clients, desc="client counts", unit="count"):
            for transport in ("in-process", "http"):
                docs, used = documents[used:used + n], used + n  # fresh conversations: nothing cached yet
                if transport == "in-process":
                    ask = lambda request: _ask_local(chat, request)  # noqa: E731
                    pool = lambda: vars(chat.engine.pool.stats)  # noqa: E731
                else:
                    ask = lambda request: _ask_http(client, request)  # noqa: E731
                    pool = lambda: server.health()["cache_pool"]  # noqa: E731
                runs.append({"transport": transport, "clients": n,
                             **_run(ask, pool, docs, args.turns, args.workload, args.max_tokens)})
    verifier, drafter = resolve_pair(args.verifier, args.drafter)
    report = {"verifier": verifier, "drafter": drafter, "workload": args.workload, "threads": threads,
              "turns": args.turns, "max_tokens": args.max_tokens, "date": time.strftime("%Y-%m-%d"), "runs": runs}
    write_outputs(report, args.out)
    print(Path(args.out + ".md").read_text())
    return 0


def _run(ask, pool, documents: list[str], turns: int, workload: str, max_tokens: int) -> dict:
    """Every client's conversation at once; latency per request, tokens per second, cache-pool hit rate."""
    before = pool()
    latencies, tokens, errors = [], [], []
    lock = threading.Lock()

    def converse(i: int) -> None:
        messages = [{"role": "system", "content": SYSTEM}]
        for turn in range(turns):
            request = {"model": "asymspec", "max_tokens": max_tokens}
            if workload == "chat":
                first = f"Here is a document:\n{documents[i]}\n\n" if turn == 0 else ""
                messages.append({"role": "user", "content": f"{first}Question {turn + 1}: what is one thing it says?"})
            else:
                if turn == 0:
                    messages.append({"role": "user", "content": AGENT_QUESTION})
                request.update(tools=[SEARCH], tool_choice="required" if turn < turns - 1 else "none",
                               parallel_tool_calls=False)
            started = time.perf_counter()
            try:
                message, completion = ask({**request, "messages": list(messages)})
            except Exception as exc:  # counted and reported, the run goes on
                with lock:
                    errors.append(repr(exc))
                return
            with lock:
                latencies.append(time.perf_counter() - started)
                tokens.append(completion)
            messages.append(message)
            messages += [{"role": "tool", "tool_call_id": call["id"], "content": documents[i]}
                         for call in message.get("tool_calls") or []]

    started = time.perf_counter()
    workers = [threading.Thread(target=converse, args=(i,)) for i in range(len(documents))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall = time.perf_counter() - started
    after = pool()
    calls = after["calls"] - before["calls"]
    return {"requests": len(latencies), "errors": errors, "wall_seconds": wall,
            "p50_seconds": median(latencies), "p95_seconds": percentile(latencies, 0.95),
            "tokens_per_second": sum(tokens) / wall, "completion_tokens": sum(tokens),
            "hit_rate": (after["continued"] - before["continued"]) / calls if calls else 0.0}


def _ask_local(chat, request: dict) -> tuple[dict, int]:
    """The request through the server's own translation, without HTTP: the same messages, tools and reply."""
    from ..server import openai_format as wire

    reply = chat.reply(**wire.chat_arguments(wire.ChatCompletionRequest(**request), chat.config))
    return wire.completion(reply, "asymspec", "local")["choices"][0]["message"], reply.usage.output_tokens


def _ask_http(client, request: dict) -> tuple[dict, int]:
    reply = client.chat.completions.create(**request)
    return reply.choices[0].message.model_dump(exclude_none=True), reply.usage.completion_tokens


def _documents(tokenizer, count: int, tokens: int = 300) -> list[str]:
    """`count` different ~300-token passages of Python's reference documentation."""
    ids = tokenizer(pydoc_text(), add_special_tokens=False)["input_ids"]
    return [tokenizer.decode(ids[i * tokens:(i + 1) * tokens]) for i in range(count)]


def write_outputs(report: dict, prefix: str) -> None:
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    write_json(Path(prefix + ".json"), report)
    rows = [[r["transport"], r["clients"], f"{r['requests']}" + (f" ({len(r['errors'])} failed)" if r["errors"] else ""),
             f"{r['p50_seconds']:.2f}", f"{r['p95_seconds']:.2f}", f"{r['tokens_per_second']:.1f}",
             f"{r['hit_rate']:.0%}"] for r in report["runs"]]
    workload = report.get("workload", "chat")
    each = ("a ~300-token document of its own in the first turn" if workload == "chat" else
            "a tool-calling agent: a forced search call per step, its ~300-token result appended, an answer last "
            "(every client's first request is the same, so one client's first call can continue another's set: "
            "above (turns - 1) / turns with several clients)")
    text = (f"# Many conversations at once, workload `{workload}` ({report['date']}, `{report['verifier']}` "
            f"verifying, `{report['drafter']}` drafting, {report['threads']} torch threads)\n\n"
            f"Each client: one conversation of {report['turns']} turns, {report['max_tokens']} tokens per reply, "
            f"{each}. Latency per request; tokens/s of the whole run; "
            "hit: calls served from their conversation's own cache set.\n\n"
            + markdown_table(["transport", "clients", "requests", "p50 s", "p95 s", "tokens/s", "hit"], rows))
    write_report(prefix + ".md", text, lambda: plot(report, prefix + ".png"))


def plot(report: dict, path: str) -> None:
    plt = pyplot()
    fig, (latency, throughput) = plt.subplots(1, 2, figsize=(9, 3.6))
    for transport, style in (("in-process", "-o"), ("http", "--s")):
        runs = [r for r in report["runs"] if r["transport"] == transport]
        clients = [r["clients"] for r in runs]
        latency.plot(clients, [r["p50_seconds"] for r in runs], style, label=f"{transport} p50")
        latency.plot(clients, [r["p95_seconds"] for r in runs], style, alpha=0.5, label=f"{transport} p95")
        throughput.plot(clients, [r["tokens_per_second"] for r in runs], style, label=transport)
    counts = sorted({r["clients"] for r in report["runs"]})
    for ax, title in ((latency, "latency per request (s)"), (throughput, "completion tokens / s")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(n) for n in counts])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("concurrent clients")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
