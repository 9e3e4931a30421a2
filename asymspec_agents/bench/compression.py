"""Compression benchmark: ratio, speed and planted-fact survival per compressor, and the cost of a rendered agent step.

Real text no one here wrote: Python's reference documentation (`pydoc_data.topics`) as tool outputs, and the
standard library's own functions (signatures, defaults and docstrings read with `inspect`) as tool schemas.

Per compressor and budget, on each document with one planted sentence ("The access code for the <name> vault is
<number>.") at a random place and the matching question as the query:
  ratio    compressed / original size in tiktoken cl100k_base tokens (verifier tokens when cl100k is unavailable)
  ms/1k    wall time per 1000 verifier tokens of input, tokenization included (targets: < 20 for non-LLM compressors)
  survival share of documents whose compressed text still contains the planted number
`embedding_static` and `embedding_transformer` are EmbeddingSelect with MiniLMEmbedder(mode="static") (the default,
also named `embedding`) and mode="transformer".
Retrieval: on the same documents cut into EmbeddingSelect's chunks, the rank of the chunk holding the planted fact
for three queries: the exact question, a paraphrase that names the vault but shares no other word with the fact
("Which PIN unlocks the Heron strongroom?") and a semantic one that names nothing ("What secret number lets someone
open the safe?"); top-1 / top-3 share and MRR per scorer (BM25 and each embedding mode benchmarked).
Agent step: a 20-message, ~8k-token conversation with tools rendered cold, again unchanged (cached), and with one
new tool call and result appended (all earlier items cached). Target: < 50 ms cached.

Writes compression.json, compression.md and compression.png under --out. `asymspec bench compression -h`.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import platform
import random
import statistics
import time
from pathlib import Path

import numpy as np

from ..plotting import pyplot
from .common import RESULTS, write_json, write_report

NON_LLM_TARGET_MS_PER_1K = 20.0
CACHED_STEP_TARGET_MS = 50.0
STDLIB_MODULES = ("os.path", "shutil", "json", "textwrap", "difflib", "fnmatch", "glob", "statistics", "html",
                  "urllib.parse", "base64", "string", "zipfile", "tarfile", "csv", "calendar", "random", "heapq",
                  "bisect", "functools", "tempfile", "gzip", "ipaddress", "secrets", "shlex", "pprint", "inspect")
VAULTS = ("Heron", "Juniper", "Basalt", "Marigold", "Quartz", "Osprey", "Tamarind", "Vesper", "Cobalt", "Lichen")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    import torch
    from tqdm import tqdm

    if args.threads:
        torch.set_num_threads(args.threads)

    from ..context.compressors import COMPRESSORS
    from ..context.tokens import Cl100kCounter, TokenCounter

    tokenizer, drafter = _load(args.tokenizer, need_drafter="surprisal" in args.compressors)
    cl100k = Cl100kCounter()
    unit = "cl100k" if cl100k.available else "verifier"
    docs = _documents(tokenizer, args.docs, args.seed, args.max_doc_chars)
    results = {"compressors": [], "retrieval": None, "tools": None, "agent_step": None}

    unknown = [name for name in args.compressors if name not in COMPRESSORS and name not in EMBEDDING_VARIANTS]
    if unknown:
        raise SystemExit(f"unknown compressor(s) {', '.join(unknown)}; use {', '.join([*COMPRESSORS, *EMBEDDING_VARIANTS])}")
    jobs = [(name, budget) for name in args.compressors for budget in args.budgets]
    progress = tqdm(total=sum(min(len(docs), args.llm_docs) if n == "surprisal" else len(docs) for n, _ in jobs),
                    desc="compressing", unit="doc")
    for name, budget in jobs:
        compressor = _build(name, drafter)
        subset = docs[: args.llm_docs] if name == "surprisal" else docs
        compressor(subset[0]["text"], budget, TokenCounter(tokenizer), subset[0]["query"])  # warm-up: lazy imports, model load
        rows = []
        for doc in subset:
            tokens = TokenCounter(tokenizer)  # fresh: tokenization is part of the measured cost
            start = time.perf_counter()
            out = compressor(doc["text"], budget, tokens, doc["query"])
            seconds = time.perf_counter() - start
            rows.append({
                "tokens_in": doc["tokens"], "tokens_out": tokens.count(out), "seconds": seconds,
                "ratio": _size(cl100k, tokens, out) / _size(cl100k, tokens, doc["text"]),
                "survived": doc["fact"] in out,
            })
            progress.update()
        results["compressors"].append(_summary(name, budget, rows))
    progress.close()

    results["retrieval"] = _retrieval_benchmark(docs, [n for n in args.compressors if n in EMBEDDING_VARIANTS or n == "embedding"])
    results["tools"] = _tools_benchmark(tokenizer, cl100k)
    results["agent_step"] = _agent_step_benchmark(tokenizer, docs, args.repeats)
    results["meta"] = {
        "tokenizer": args.tokenizer, "size_unit": unit, "cl100k_note": cl100k.note,
        "tiktoken_cache_dir": os.environ.get("TIKTOKEN_CACHE_DIR"), "documents": len(docs),
        "llm_documents": min(len(docs), args.llm_docs), "seed": args.seed, "python": platform.python_version(),
        "machine": platform.machine(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "load_average": _load_average(),
        "targets": {"non_llm_ms_per_1k": NON_LLM_TARGET_MS_PER_1K, "cached_step_ms": CACHED_STEP_TARGET_MS},
    }
    out = Path(args.out)
    write_json(out / "compression.json", results)
    write_report(out / "compression.md", _markdown(results), lambda: _plot(results, out / "compression.png"))
    print(_markdown(results))
    print(f"wrote {out / 'compression.json'}, {out / 'compression.md'}, {out / 'compression.png'}")
    return 0


def _parse(argv):
    parser = argparse.ArgumentParser(prog="asymspec bench compression", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default="bundled", choices=["bundled", "byte"],
                        help="verifier tokenizer for budgets: SmolLM2 (bundled; also the surprisal drafter) or bytes")
    parser.add_argument("--compressors", default="head_tail,bm25,embedding_static,embedding_transformer,surprisal",
                        type=lambda s: [x for x in s.split(",") if x], help="comma-separated compressor names")
    parser.add_argument("--budgets", default="256,512", type=lambda s: [int(x) for x in s.split(",")],
                        help="token budgets (verifier tokens), comma-separated")
    parser.add_argument("--docs", type=int, default=40, help="documents from pydoc_data.topics")
    parser.add_argument("--llm-docs", type=int, default=8, help="documents for the drafter-based (surprisal) compressor")
    parser.add_argument("--max-doc-chars", type=int, default=12000, help="cut longer documents to this many characters")
    parser.add_argument("--repeats", type=int, default=20, help="timed repeats of the agent-step renders")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads for the model-based compressors (0: torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS), help=f"output folder (default {RESULTS})")
    return parser.parse_args(argv)


EMBEDDING_VARIANTS = {"embedding_static": "static", "embedding_transformer": "transformer"}


def _build(name: str, drafter):
    from ..context.compressors import COMPRESSORS, EmbeddingSelect, drafter_surprisal

    if name in EMBEDDING_VARIANTS:
        return EmbeddingSelect(mode=EMBEDDING_VARIANTS[name])
    return COMPRESSORS[name](drafter_surprisal(drafter)) if name == "surprisal" else COMPRESSORS[name]()


# ---------------------------------------------------------------------------------------------------------------
# Data


def _load(which: str, need_drafter: bool):
    if which == "byte":
        from ..testing import tiny_random_pair

        pair = tiny_random_pair(0)
        return pair.tokenizer, pair.drafter
    from ..models import load_model

    model, tokenizer = load_model("bundled")
    return tokenizer, model if need_drafter else None


def _documents(tokenizer, count: int, seed: int, max_chars: int) -> list[dict]:
    """Reference-manual pages of at least ~1k tokens, each with one planted fact and the question that asks for it."""
    from pydoc_data.topics import topics

    rng = random.Random(seed)
    names = sorted(name for name, text in topics.items() if len(text) >= 3000)
    rng.shuffle(names)
    docs = []
    for name in names[:count]:
        text = topics[name][:max_chars]
        vault, number = rng.choice(VAULTS), str(rng.randrange(1000, 9999))
        fact = f"The access code for the {vault} vault is {number}."
        breaks = [i + 2 for i in range(len(text) - 2) if text[i] == "." and text[i + 1] == " "]
        lo, hi = len(text) // 10, len(text) * 9 // 10
        at = rng.choice([b for b in breaks if lo <= b <= hi] or [len(text) // 2])
        planted = text[:at] + fact + " " + text[at:]
        docs.append({"name": name, "text": planted, "fact": number, "query": f"What is the access code for the {vault} vault?",
                     "tokens": len(tokenizer.encode(planted, add_special_tokens=False))})
    return docs


def stdlib_tool_specs() -> list:
    """ToolSpecs of documented, introspectable public functions of common standard-library modules."""
    from ..context.tools import tool_spec_from_callable

    specs, seen = [], set()
    for module_name in STDLIB_MODULES:
        module = importlib.import_module(module_name)
        for name in sorted(getattr(module, "__all__", None) or dir(module)):
            function = getattr(module, name, None)
            if name.startswith("_") or not inspect.isfunction(function) or not inspect.getdoc(function):
                continue
            tool_name = f"{module_name.replace('.', '_')}_{name}"
            if tool_name in seen:
                continue
            try:
                specs.append(tool_spec_from_callable(function, name=tool_name))
                seen.add(tool_name)
            except Exception:
                continue
    return specs


PARAPHRASES = ("Which PIN unlocks the {vault} strongroom?", "What number opens the {vault} safe?",
               "Tell me the combination that gets you into the {vault} strongroom.")
SEMANTIC_QUERIES = ("What secret number lets someone open the safe?", "Which PIN unlocks the strongroom?",
                    "What is the combination for getting into the safe?")


def retrieval_queries(doc: dict, index: int) -> dict[str, str]:
    """The exact question, a paraphrase naming only the vault, and a semantic query naming nothing (rotated per doc)."""
    vault = doc["query"].split("for the ")[1].split(" vault")[0]
    return {"exact": doc["query"], "paraphrase": PARAPHRASES[index % len(PARAPHRASES)].format(vault=vault),
            "semantic": SEMANTIC_QUERIES[index % len(SEMANTIC_QUERIES)]}


def _retrieval_benchmark(docs: list[dict], embedding_names: list[str]) -> dict:
    """Rank of the fact's chunk among a document's chunks, per scorer and query kind."""
    from ..context.compressors import BM25Select, split_chunks

    bm25 = BM25Select()
    scorers = {"bm25": lambda chunks, queries: [np.asarray(bm25.score(chunks, q), dtype=np.float64) for q in queries]}
    for name in embedding_names:
        embedder = _build(name, None).embedder

        def score(chunks, queries, embedder=embedder):
            vectors = np.asarray(embedder(list(queries) + chunks), dtype=np.float64)  # [q + n_chunks, dim]
            return vectors[:len(queries)] @ vectors[len(queries):].T  # [q, n_chunks]

        scorers[name] = score
    ranks: dict[tuple[str, str], list[int]] = {}
    seconds: dict[str, float] = {name: 0.0 for name in scorers}
    chunk_counts = []
    for index, doc in enumerate(docs):
        chunks = split_chunks(doc["text"], 400)
        chunk_counts.append(len(chunks))
        target = next(i for i, chunk in enumerate(chunks) if doc["fact"] in chunk)
        queries = retrieval_queries(doc, index)
        for name, score in scorers.items():
            start = time.perf_counter()
            rows = score(chunks, list(queries.values()))
            seconds[name] += time.perf_counter() - start
            for kind, row in zip(queries, rows):
                ahead = int(np.sum(row > row[target]) + np.sum(row[:target] == row[target]))  # ties: earlier first
                ranks.setdefault((name, kind), []).append(ahead)
    rows = []
    for (name, kind), values in ranks.items():
        values = np.asarray(values)
        rows.append({"scorer": name, "query": kind, "documents": len(values), "top1": float(np.mean(values < 1)),
                     "top3": float(np.mean(values < 3)), "mrr": float(np.mean(1.0 / (values + 1)))})
    return {"rows": rows, "chunks_mean": statistics.mean(chunk_counts) if chunk_counts else 0,
            "seconds": seconds, "paraphrases": list(PARAPHRASES), "semantic_queries": list(SEMANTIC_QUERIES)}


# ---------------------------------------------------------------------------------------------------------------
# Tools and agent step


def _tools_benchmark(tokenizer, cl100k) -> dict:
    from ..context.render import DualContext
    from ..context.messages import UserMessage

    specs = stdlib_tool_specs()
    rows = []
    for group in (specs[:10], specs):
        ctx = DualContext(tokenizer)
        start = time.perf_counter()
        views = ctx.render([UserMessage("hi")], tools=group)
        seconds = time.perf_counter() - start
        [item] = [i for i in views.report.items if i.kind == "tools"]
        before = item.cl100k_before if item.cl100k_before is not None else item.tokens_before
        after = item.cl100k_after if item.cl100k_after is not None else item.tokens_after
        rows.append({"tools": len(group), "tokens_full": item.tokens_before, "tokens_signatures": item.tokens_after,
                     "ratio": after / before, "ms_per_1k": 1000 * seconds / item.tokens_before * 1000})
    sample = [line for line in views.comp_text.split("<tools>\n")[1].split("\n</tools>")[0].split("\n")[:5]]
    return {"rows": rows, "sample_signatures": sample}


def agent_step_history(docs: list[dict], steps: int = 9) -> list:
    """A 20-message agent conversation (system, question, then tool call + result pairs reading manual pages)."""
    from ..context.messages import AssistantMessage, SystemMessage, ToolCall, ToolResult, UserMessage

    history = [SystemMessage("You are a Python documentation agent. Answer precisely and cite the manual."),
               UserMessage("Which statements can change control flow inside a loop, and how do exceptions interact?")]
    for step in range(steps):
        doc = docs[step % len(docs)]
        call = ToolCall(f"call_{step}", "read_manual", {"topic": doc["name"]})
        history += [AssistantMessage(f"I will read the '{doc['name']}' page.", tool_calls=[call]),
                    ToolResult(call.id, "read_manual", doc["text"][:3000])]
    return history


def _agent_step_benchmark(tokenizer, docs: list[dict], repeats: int) -> dict:
    from ..context.messages import AssistantMessage, ToolCall, ToolResult
    from ..context.render import DualContext

    tools = stdlib_tool_specs()[:8]
    history = agent_step_history(docs)
    ctx = DualContext(tokenizer)
    cold = _timed(lambda: ctx.render(history, tools=tools))
    views = ctx.render(history, tools=tools)
    cached = [_timed(lambda: ctx.render(history, tools=tools)) for _ in range(repeats)]
    appended = []
    for n in range(repeats):  # each repeat appends a new call + result the context has not seen
        call = ToolCall(f"new_{n}", "read_manual", {"topic": docs[n % len(docs)]["name"]})
        step = history + [AssistantMessage("One more page.", tool_calls=[call]),
                          ToolResult(call.id, "read_manual", f"(page {n}) " + docs[(n + 9) % len(docs)]["text"][:3000])]
        appended.append(_timed(lambda: ctx.render(step, tools=tools)))
    return {
        "messages": len(history), "full_tokens": views.report.full_tokens, "comp_tokens": views.report.comp_tokens,
        "full_cl100k": views.report.full_cl100k, "comp_cl100k": views.report.comp_cl100k,
        "cold_ms": 1000 * cold, "cached_ms_median": 1000 * statistics.median(cached),
        "cached_ms_p90": 1000 * sorted(cached)[int(0.9 * (len(cached) - 1))],
        "append_one_ms_median": 1000 * statistics.median(appended),
    }


def _timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


# ---------------------------------------------------------------------------------------------------------------
# Summaries and output


def _size(cl100k, tokens, text: str) -> int:
    value = cl100k.count(text)
    return value if value is not None else tokens.count(text)


def _summary(name: str, budget: int, rows: list[dict]) -> dict:
    total_tokens = sum(r["tokens_in"] for r in rows)
    return {
        "compressor": name, "budget": budget, "documents": len(rows), "llm": name == "surprisal",
        "tokens_in_mean": total_tokens / len(rows),
        "ratio_mean": statistics.mean(r["ratio"] for r in rows),
        "ms_per_1k": 1000 * sum(r["seconds"] for r in rows) / total_tokens * 1000,
        "ms_per_1k_worst": max(1000 * r["seconds"] / r["tokens_in"] * 1000 for r in rows),
        "survival": sum(r["survived"] for r in rows) / len(rows),
        "over_budget": sum(r["tokens_out"] > budget for r in rows),
    }


def _markdown(results: dict) -> str:
    meta = results["meta"]
    unit = meta["size_unit"]
    lines = [
        "# Compression benchmark", "",
        f"Tokenizer (budgets): {meta['tokenizer']}. Sizes in {unit} tokens"
        + (f" ({meta['cl100k_note']})" if meta["cl100k_note"] else "") + ". "
        f"{meta['documents']} pydoc topics ({meta['llm_documents']} for surprisal), one planted fact each. "
        f"CPUs: {meta['cpus']} (torch threads {meta['torch_threads']}), load average at the end: {meta['load_average']} "
        "(other processes shared the machine; model-based timings are sensitive to that).", "",
        f"| compressor | budget | docs | mean tokens in | ratio ({unit} out/in) | ms per 1k tokens | worst ms/1k | fact survival | over budget |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["compressors"]:
        target = "" if r["llm"] else (" ✓" if r["ms_per_1k"] < NON_LLM_TARGET_MS_PER_1K else " ✗")
        lines.append(f"| {r['compressor']}{' (LLM)' if r['llm'] else ''} | {r['budget']} | {r['documents']} | {r['tokens_in_mean']:.0f} "
                     f"| {r['ratio_mean']:.3f} | {r['ms_per_1k']:.2f}{target} | {r['ms_per_1k_worst']:.2f} | {r['survival']:.0%} | {r['over_budget']} |")
    lines += ["", f"Target: non-LLM compressors < {NON_LLM_TARGET_MS_PER_1K:.0f} ms per 1k tokens. "
              "`embedding_static` is EmbeddingSelect's default (all-MiniLM-L6-v2 distilled to a static word-piece table), "
              "`embedding_transformer` runs the exact model.", ""]
    retrieval = results.get("retrieval")
    if retrieval and retrieval["rows"]:
        lines += ["## Retrieval: rank of the planted fact's chunk", "",
                  f"Each document cut into EmbeddingSelect's chunks ({retrieval['chunks_mean']:.0f} per document on "
                  "average); share of documents whose fact chunk ranks first / in the top 3, and mean reciprocal rank. "
                  "Queries: exact = the benchmark question; paraphrase = names the vault, no other word of the fact "
                  f"(e.g. \"{retrieval['paraphrases'][0].format(vault='Heron')}\"); semantic = names nothing "
                  f"(e.g. \"{retrieval['semantic_queries'][0]}\").", "",
                  "| scorer | query | docs | top-1 | top-3 | MRR |", "|---|---|---|---|---|---|"]
        for r in retrieval["rows"]:
            lines.append(f"| {r['scorer']} | {r['query']} | {r['documents']} | {r['top1']:.0%} | {r['top3']:.0%} | {r['mrr']:.2f} |")
        lines.append("")
    lines += [
              "## Tool schemas -> signatures (standard-library functions)", "",
              "| tools | verifier tokens full | verifier tokens signatures | ratio | ms per 1k tokens |", "|---|---|---|---|---|"]
    for r in results["tools"]["rows"]:
        lines.append(f"| {r['tools']} | {r['tokens_full']} | {r['tokens_signatures']} | {r['ratio']:.3f} | {r['ms_per_1k']:.2f} |")
    lines += ["", "Sample signatures:", "", "```", *results["tools"]["sample_signatures"], "```", ""]
    s = results["agent_step"]
    ok = "✓" if s["cached_ms_median"] < CACHED_STEP_TARGET_MS else "✗"
    lines += ["## Rendered agent step", "",
              f"{s['messages']} messages, full view {s['full_tokens']} verifier tokens ({s['full_cl100k']} cl100k), "
              f"compressed view {s['comp_tokens']} ({s['comp_cl100k']} cl100k).", "",
              "| render | ms |", "|---|---|",
              f"| cold (every item compressed and tokenized) | {s['cold_ms']:.1f} |",
              f"| cached, same history (median) | {s['cached_ms_median']:.2f} {ok} |",
              f"| cached, same history (p90) | {s['cached_ms_p90']:.2f} |",
              f"| one new call + result appended (median) | {s['append_one_ms_median']:.2f} |", "",
              f"Target: cached step < {CACHED_STEP_TARGET_MS:.0f} ms.", ""]
    return "\n".join(lines)


def _plot(results: dict, path: Path) -> None:
    plt = pyplot()
    from matplotlib.patches import Patch

    rows = results["compressors"][::-1]  # barh draws bottom-up; keep the table's order top-down
    labels = [f"{r['compressor']} @ {r['budget']}" for r in rows]
    colors = [COLORS[_family(r["compressor"])] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(15, 0.45 * len(rows) + 2.2), sharey=True)
    panels = [
        ("ratio_mean", f"size after / before ({results['meta']['size_unit']} tokens)", lambda v: f"{v:.3f}"),
        ("ms_per_1k", "ms per 1k verifier tokens (log scale)", lambda v: f"{v:.1f}"),
        ("survival", "planted fact survives", lambda v: f"{v:.0%}"),
    ]
    for ax, (key, title, fmt) in zip(axes, panels):
        values = [r[key] for r in rows]
        bars = ax.barh(range(len(rows)), values, color=colors)
        ax.bar_label(bars, labels=[fmt(v) for v in values], fontsize=8, padding=2)
        ax.set_title(title, fontsize=10)
        ax.set_yticks(range(len(rows)), labels, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        if key == "ms_per_1k":
            ax.set_xscale("log")
            ax.axvline(NON_LLM_TARGET_MS_PER_1K, color="black", linestyle="--", linewidth=1)
            ax.set_xlim(min(values) / 2, max(values) * 8)
        else:
            ax.set_xlim(0, 1.15)
    step = results["agent_step"]
    fig.legend(handles=[Patch(color=COLORS["text"], label="text statistics (head/tail, BM25)"),
                        Patch(color=COLORS["static"], label="static MiniLM table"),
                        Patch(color=COLORS["encoder"], label="sentence encoder (MiniLM transformer)"),
                        Patch(color=COLORS["llm"], label="drafter surprisal (LLM)"),
                        plt.Line2D([], [], color="black", linestyle="--", label=f"target {NON_LLM_TARGET_MS_PER_1K:.0f} ms / 1k (non-LLM)")],
               loc="lower center", ncol=5, fontsize=9, frameon=False)
    fig.suptitle(f"Compressors on Python reference pages. Agent step ({step['messages']} messages, {step['full_tokens']} tokens): "
                 f"{step['cached_ms_median']:.1f} ms cached, {step['cold_ms']:.0f} ms cold", fontsize=11)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


COLORS = {"text": "#4c72b0", "static": "#55a868", "encoder": "#dd8452", "llm": "#c44e52"}


def _family(name: str) -> str:
    return {"embedding": "static", "embedding_static": "static", "embedding_transformer": "encoder",
            "surprisal": "llm"}.get(name, "text")


def _load_average():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
