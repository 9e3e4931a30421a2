"""Throughput on the bundled model: our modes against transformers `generate` and assisted generation.

Every system decodes the same real-text prompts greedily; runs are interleaved round-robin so machine noise hits
all systems alike, and medians are reported. In the same run, single forwards over k = 1, 2, 4, 8, 16 tokens are
timed at each prompt length; from them and the forward sizes each mode actually used comes its *ideal* time, and
measured/ideal is the engine's own overhead.
"""

from __future__ import annotations

import argparse
import time

import torch
from tqdm import tqdm

from ..plotting import pyplot
from .common import RESULTS, markdown_table, median, pydoc_text, write_json, write_report

# engine systems are "mode" or "mode rule"; "asymmetric ratio" keeps the paper's K = 2, the others take --k-max
SYSTEMS = ("hf_generate", "hf_assisted", "full", "symmetric_full", "asymmetric ratio", "asymmetric fused")
ENGINE_SYSTEMS = SYSTEMS[2:]
KS = (1, 2, 4, 8, 16)
LAST_ROW_SIZES = (2, 3)


def forward_sizes(k_max: int) -> tuple[int, ...]:
    """The k timed alone: powers of two and the largest verification forward (k_max drafts + the last token)."""
    return tuple(sorted(set(KS) | {k_max + 1}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec bench throughput", description=__doc__)
    parser.add_argument("--verifier", default="bundled")
    parser.add_argument("--lengths", type=int, nargs="+", default=[100, 1000, 3000])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--k-max", type=int, default=16,
                        help="longest draft block, except for 'asymmetric ratio' (the paper's K = 2); transformers' "
                        "assisted generation starts at 20")
    parser.add_argument("--out", default=str(RESULTS / "throughput"),
                        help=f"path prefix of the .json/.md/.png files (default {RESULTS / 'throughput'})")
    args = parser.parse_args(argv)
    from ..engine import AsymSpecEngine

    engine = AsymSpecEngine.from_pretrained(args.verifier, args.verifier)  # identical drafter
    corpus = engine.tokenizer(pydoc_text(), add_special_tokens=False)["input_ids"]
    report = {"settings": vars(args), "torch_threads": torch.get_num_threads(), "lengths": []}
    for length in args.lengths:
        prompt = corpus[:length]
        comp = prompt[-max(1, length // 4):]
        report["lengths"].append(measure_length(engine, prompt, comp, args))
    write_outputs(report, args.out)
    print(open(args.out + ".md").read())
    return 0


def measure_length(engine, prompt: list[int], comp: list[int], args) -> dict:
    runs = {name: [] for name in SYSTEMS}
    warmup = argparse.Namespace(**{**vars(args), "new_tokens": 4})
    for name in SYSTEMS:  # first calls pay one-off costs (kernel selection, allocations): keep them out
        run_system(name, engine, prompt, comp, warmup)
    bar = tqdm(total=args.repeats * len(SYSTEMS), desc=f"throughput @ {len(prompt)} tokens", unit="run")
    for _ in range(args.repeats):
        for name in SYSTEMS:
            runs[name].append(run_system(name, engine, prompt, comp, args))
            bar.update()
    bar.close()
    costs = {view: forward_costs(engine, ids, forward_sizes(args.k_max), decoded=args.new_tokens // 2)
             for view, ids in (("full", prompt), ("comp", comp))}
    result = {"prompt_tokens": len(prompt), "comp_tokens": len(comp), "forward_costs": costs, "systems": {}}
    for name, samples in runs.items():
        entry = {
            "tokens_per_s": median([s["tokens"] / s["seconds"] for s in samples]),
            "seconds": median([s["seconds"] for s in samples]),
            "new_tokens": samples[0]["tokens"],
            "token_ids": samples[0]["token_ids"],
        }
        if "stats" in samples[0]:
            stats = samples[0]["stats"]
            ideal = ideal_seconds(stats, costs)
            entry.update(acceptance_rate=stats.acceptance_rate, ideal_seconds=ideal,
                         measured_over_ideal=entry["seconds"] / ideal,
                         outside_forwards=median([1 - s["stats"].seconds("verifier") / s["seconds"]
                                                  - s["stats"].seconds("drafter") / s["seconds"] for s in samples]))
        result["systems"][name] = entry
    base = result["systems"]
    for name, entry in base.items():
        entry["vs_hf_generate"] = entry["tokens_per_s"] / base["hf_generate"]["tokens_per_s"]
        entry["vs_hf_assisted"] = entry["tokens_per_s"] / base["hf_assisted"]["tokens_per_s"]
    base["full"]["same_output_as_hf_generate"] = base["full"]["token_ids"] == base["hf_generate"]["token_ids"]
    base["symmetric_full"]["same_output_as_hf_assisted"] = (
        base["symmetric_full"]["token_ids"] == base["hf_assisted"]["token_ids"])
    for entry in base.values():
        entry.pop("token_ids")
    return result


def run_system(name: str, engine, prompt: list[int], comp: list[int], args) -> dict:
    from ..engine import GenerationConfig

    if name.startswith("hf_"):
        model = engine.verifier
        inputs = torch.tensor([prompt])
        extra = {"assistant_model": model} if name == "hf_assisted" else {}
        start = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=args.new_tokens,
                                 do_sample=False, pad_token_id=engine.tokenizer.pad_token_id, **extra)
        seconds = time.perf_counter() - start
        ids = out[0, len(prompt):].tolist()
        return {"seconds": seconds, "tokens": len(ids), "token_ids": ids}
    engine.reset()  # every run pays its own prefill, as generate does
    mode, _, rule = name.partition(" ")
    k_max = None if rule == "ratio" else args.k_max
    config = GenerationConfig(mode=mode, acceptance=rule or None, max_new_tokens=args.new_tokens, k_max=k_max,
                              decisions=None)
    start = time.perf_counter()
    result = engine.generate(prompt, comp, config)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "tokens": len(result.token_ids), "token_ids": result.token_ids, "stats": result.stats}


def forward_costs(engine, prompt: list[int], sizes: tuple[int, ...] = KS, decoded: int = 0, repeats: int = 7) -> dict:
    """Median seconds of a fresh prefill of the prompt and of one forward over k new tokens on its cache.

    The forwards are timed after `decoded` more tokens, the middle of a run: on a 100-token prompt, 128 new
    tokens more than double the context the last forwards attend to."""
    from ..engine.streams import KVStream

    stream = KVStream(engine.verifier, "verifier", "probe", engine.vocab_size)
    prefill = []
    for _ in range(repeats):
        stream.reset()
        start = time.perf_counter()
        stream.sync(prompt)
        prefill.append(time.perf_counter() - start)
    costs = {"prefill": median(prefill)}
    stream.sync(prompt + (prompt * (1 + decoded // len(prompt)))[:decoded])
    base = len(stream)
    for k, keep in [(k, None) for k in sizes] + [(k, 1) for k in LAST_ROW_SIZES]:  # warm every shape first
        stream.forward(prompt[-1:] + prompt[:k - 1], keep=keep)
        stream.rollback(base)
    for k in sizes:
        costs[k] = _median_forward(stream, prompt[-1:] + prompt[:k - 1], None, repeats)
    for k in LAST_ROW_SIZES:  # the drafter reads the last accepted draft and the bonus token, keeping one row
        costs[f"{k} last row"] = _median_forward(stream, prompt[-1:] + prompt[:k - 1], 1, repeats)
    return costs


def _median_forward(stream, tokens: list[int], keep: int | None, repeats: int) -> float:
    base = len(stream)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        stream.forward(tokens, keep=keep)
        samples.append(time.perf_counter() - start)
        stream.rollback(base)
    return median(samples)


def ideal_seconds(stats, costs: dict) -> float:
    """Time the forwards this call made would take at the costs measured in isolation (prefill included)."""
    total = 0.0
    for stream in stats.streams.values():
        table = costs[stream.view]
        if stream.prefill_tokens:
            total += table["prefill"]
        for size, count in stream.decode_sizes.items():
            # forwards that kept one row, at the sizes timed that way; any others are costed as full forwards
            partial = stream.decode_partial_logits[size] if size in LAST_ROW_SIZES else 0
            total += (count - partial) * _cost(table, size)
            if partial:
                total += partial * table[f"{size} last row"]
    return total


def _cost(table: dict, size: int) -> float:
    """Interpolate linearly between the measured k (cost grows sub-linearly with k here)."""
    ks = sorted(k for k in table if isinstance(k, int))  # (not the "k last row" entries)
    if size in table:
        return table[size]
    lower = max([k for k in ks if k < size], default=ks[0])
    upper = min([k for k in ks if k > size], default=ks[-1])
    if upper == lower:
        return table[lower] * size / lower
    return table[lower] + (table[upper] - table[lower]) * (size - lower) / (upper - lower)


def write_outputs(report: dict, prefix: str) -> None:
    write_json(__import__("pathlib").Path(prefix + ".json"), report)
    header = ["prompt", "system", "tok/s", "× generate", "× assisted", "acceptance", "measured/ideal", "same output"]
    rows = []
    for entry in report["lengths"]:
        for name, s in entry["systems"].items():
            same = s.get("same_output_as_hf_generate", s.get("same_output_as_hf_assisted", ""))
            rows.append([entry["prompt_tokens"], name, f"{s['tokens_per_s']:.1f}", f"{s['vs_hf_generate']:.2f}",
                         f"{s['vs_hf_assisted']:.2f}", f"{s['acceptance_rate']:.0%}" if "acceptance_rate" in s else "",
                         f"{s['measured_over_ideal']:.3f}" if "measured_over_ideal" in s else "", same])
    sizes = forward_sizes(report["settings"]["k_max"])
    cost_rows = [[e["prompt_tokens"], *(f"{e['forward_costs']['full'][k] / e['forward_costs']['full'][1]:.2f}" for k in sizes),
                  f"{e['forward_costs']['full']['2 last row'] / e['forward_costs']['full'][1]:.2f}",
                  f"{e['forward_costs']['full'][1] * 1000:.1f}"] for e in report["lengths"]]
    text = ("# Throughput (bundled SmolLM2-135M-Instruct, greedy, identical drafter, medians of "
            f"{report['settings']['repeats']} interleaved runs, {report['settings']['new_tokens']} new tokens, "
            f"k_max {report['settings']['k_max']}, "
            f"{report['torch_threads']} torch thread(s))\n\n"
            + markdown_table(header, rows)
            + "\n## One verifier forward over k new tokens, relative to k = 1\n\n"
            + markdown_table(["prompt", *(f"k={k}" for k in sizes), "k=2, last row's logits only", "k=1 ms"], cost_rows))
    write_report(prefix + ".md", text, lambda: plot(report, prefix + ".png"))


def plot(report: dict, path: str) -> None:
    plt = pyplot()

    lengths = [e["prompt_tokens"] for e in report["lengths"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / len(SYSTEMS)
    for i, name in enumerate(SYSTEMS):
        values = [e["systems"][name]["tokens_per_s"] for e in report["lengths"]]
        left.bar([x + i * width for x in range(len(lengths))], values, width, label=name)
    left.set_xticks([x + width * (len(SYSTEMS) - 1) / 2 for x in range(len(lengths))], [str(n) for n in lengths])
    left.set_xlabel("prompt tokens")
    left.set_ylabel("new tokens / s (median)")
    left.set_title("Decoding speed")
    left.legend(fontsize=8)
    for name in ENGINE_SYSTEMS:
        right.plot(lengths, [e["systems"][name]["measured_over_ideal"] for e in report["lengths"]], marker="o", label=name)
    right.axhline(1.05, color="grey", linestyle="--", label="5% overhead")
    right.set_xscale("log")
    right.set_xlabel("prompt tokens")
    right.set_ylabel("measured / ideal time")
    right.set_title("Engine overhead over its own forwards")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
