"""What a drafter costs per token against its verifier, in wall time and in FLOPs.

Each model reads the same real text (Python's reference docs) into its KV cache, then one-token decode forwards
keeping one logits row (what a drafter's draft step does) are timed at each context length, interleaved across
models so that a noisy machine slows them alike; medians are reported. FLOPs come from the engine's own counter
(2 × body weights per token, attention over the context, the output head). Weight memory counts int8 weights as
one byte. An int8 copy of a float32 drafter costs the same FLOPs and less time; a layer cut costs fewer of both.
"""

from __future__ import annotations

import argparse
import time

import torch
from tqdm import tqdm

from ..plotting import pyplot
from .common import RESULTS, markdown_table, median, pydoc_text, write_json, write_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec bench drafters", description=__doc__)
    parser.add_argument("--verifier", default="bundled")
    parser.add_argument("--drafters", nargs="+", default=["bundled-small", "bundled-int8"])
    parser.add_argument("--int8", action="store_true", help="also time an int8 copy of each float32 drafter")
    parser.add_argument("--contexts", type=int, nargs="+", default=[1000, 4000], help="context lengths in tokens")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=str(RESULTS / "drafters"),
                        help=f"output prefix (default {RESULTS / 'drafters'})")
    args = parser.parse_args(argv)
    from ..models import load_model
    from ..models.loading import quantized_copy

    verifier, tokenizer = load_model(args.verifier)
    models = {args.verifier: verifier}
    for name in args.drafters:
        models[name] = load_model(name)[0]
        if args.int8 and not _is_quantized(models[name]):
            models[f"{name}+int8"] = quantized_copy(models[name])
    corpus = tokenizer(pydoc_text(), add_special_tokens=False)["input_ids"]
    report = {"verifier": args.verifier, "threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d"),
              "models": {name: describe(model) for name, model in models.items()},
              "contexts": {str(n): measure(models, corpus[:n], args.repeats) for n in args.contexts}}
    write_outputs(report, args.out)
    print(open(args.out + ".md").read())
    return 0


def describe(model) -> dict:
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    from ..engine.streams import is_int8_linear, weight_count

    weights = weight_count(model)
    int8 = sum(m.weight().numel() for m in filter(is_int8_linear, model.modules()))
    return {"layers": config.num_hidden_layers, "weights": weights, "weight_mb": ((weights - int8) * 4 + int8) / 2**20}


def measure(models: dict, context: list[int], repeats: int) -> dict:
    """Median seconds and FLOPs of a one-token, one-row decode forward on a `len(context)`-token cache."""
    from ..engine.streams import KVStream

    streams = {}
    for name, model in models.items():
        stream = KVStream(model, "probe", "full", model.config.vocab_size)
        stream.sync(context)  # holds context[:-1]; the timed forward feeds the last token
        for _ in range(2):  # warm the shapes
            stream.forward(context[-1:], keep=1)
            stream.rollback(len(context) - 1)
        streams[name] = stream
    samples = {name: [] for name in models}
    for _ in tqdm(range(repeats), desc=f"drafters @{len(context)}", unit="round"):
        for name, stream in streams.items():
            start = time.perf_counter()
            stream.forward(context[-1:], keep=1)
            samples[name].append(time.perf_counter() - start)
            stream.rollback(len(context) - 1)
    return {name: {"seconds": median(samples[name]), "flops": streams[name]._flops(1, len(context) - 1, 1)}
            for name in models}


def write_outputs(report: dict, prefix: str) -> None:
    from pathlib import Path

    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    write_json(Path(prefix + ".json"), report)
    verifier = report["verifier"]
    lengths = list(report["contexts"])
    rows = []
    for name, info in report["models"].items():
        row = [name, info["layers"], f"{info['weight_mb']:.0f}"]
        for n in lengths:
            found, base = report["contexts"][n][name], report["contexts"][n][verifier]
            row += [f"{found['seconds'] * 1000:.1f}", f"{found['seconds'] / base['seconds']:.2f}",
                    f"{found['flops'] / base['flops']:.2f}"]
        rows.append(row)
    header = ["model", "layers", "MB"]
    for n in lengths:
        header += [f"ms @{int(n) // 1000}k", "× V", "FLOPs × V"]
    text = (f"# Drafter cost per token ({report['date']}, {report['threads']} torch threads)\n\n"
            f"One-token decode forward keeping one logits row, median; × V: relative to the verifier "
            f"`{verifier}` at the same context.\n\n" + markdown_table(header, rows))
    write_report(prefix + ".md", text, lambda: plot(report, prefix + ".png"))


def plot(report: dict, path: str) -> None:
    plt = pyplot()
    names, lengths = list(report["models"]), list(report["contexts"])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    width = 0.8 / len(lengths)
    for j, n in enumerate(lengths):
        base = report["contexts"][n][report["verifier"]]
        for ax, key in zip(axes, ("seconds", "flops")):
            ax.bar([i + j * width for i in range(len(names))],
                   [report["contexts"][n][name][key] / base[key] for name in names], width, label=f"{n} tokens")
    for ax, title in zip(axes, ("wall time per token × verifier", "FLOPs per token × verifier")):
        ax.set_xticks([i + width * (len(lengths) - 1) / 2 for i in range(len(names))], names, rotation=15)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_title(title)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _is_quantized(model) -> bool:
    from ..engine.streams import is_int8_linear

    return any(map(is_int8_linear, model.modules()))
