"""The `asymspec` command: `asymspec generate …`, `asymspec bench NAME …` and `asymspec train-drafter …`."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

# benchmark name -> module of asymspec_agents.bench; the accuracy module serves four names
BENCHMARKS = {"throughput": "throughput", "compression": "compression", "precision": "precision",
              "accuracy": "accuracy", "cost": "accuracy", "scaling": "accuracy", "all": "accuracy",
              "decisions": "decisions"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_generate(commands.add_parser("generate", help="decode one reply and print it with its speculation stats"))
    # add_help=False: `asymspec bench NAME -h` reaches the benchmark's own parser
    bench = commands.add_parser("bench", add_help=False,
                                help=f"run a benchmark ({', '.join(BENCHMARKS)}); `asymspec bench NAME -h`")
    bench.add_argument("name", choices=list(BENCHMARKS))
    # add_help=False: `asymspec train-drafter -h` reaches the trainer's own parser
    commands.add_parser("train-drafter", add_help=False,
                        help="train a drafter (LoRA, DPO) to be rejected at decision points; `asymspec train-drafter -h`")
    args, rest = parser.parse_known_args(argv)
    if args.command == "train-drafter":
        return importlib.import_module("asymspec_agents.training.adversarial").main(rest) or 0
    if args.command == "bench":
        module = BENCHMARKS[args.name]
        argv_rest = [args.name, *rest] if module == "accuracy" else rest
        return importlib.import_module(f"asymspec_agents.bench.{module}").main(argv_rest) or 0
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return _generate(args)


def _add_generate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt", required=True, help="the user message (full view)")
    p.add_argument("--compressed-prompt", help="the verifier's view of it; default: the same as --prompt")
    p.add_argument("--system", help="an optional system message for both views")
    p.add_argument("--raw", action="store_true", help="use the prompts as raw text, without the chat template")
    p.add_argument("--verifier", default="bundled",
                   help="hub id, folder, .gguf file, 'bundled' (default), 'bundled-gemma', or the pair 'bundled-hetero'")
    p.add_argument("--drafter", help="same forms as --verifier; default: the verifier's own weights")
    p.add_argument("--mode", default="asymmetric", choices=["full", "compressed", "symmetric", "symmetric_full", "asymmetric"])
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=1.0)
    p.add_argument("--no-cda", action="store_true", help="turn the divergence gate off")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--k-max", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stop", action="append", default=[], help="a stop string (repeatable)")
    p.add_argument("--json", action="store_true", help="print the result and stats as JSON instead of a table")


def _generate(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from .context.chat_format import chat_format
    from .engine import AsymSpecEngine, GenerationConfig
    from .errors import AsymSpecError
    from .models import PAIRS

    try:
        config = GenerationConfig(
            mode=args.mode, max_new_tokens=args.max_new_tokens, beta=args.beta, gamma=args.gamma, cda=not args.no_cda,
            temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, k_max=args.k_max, seed=args.seed,
            stop=args.stop,
        )
        drafter = args.drafter or (None if args.verifier in PAIRS else args.verifier)
        engine = AsymSpecEngine.from_pretrained(verifier=args.verifier, drafter=drafter)
        # the model's chat template, or the plain transcript for base models; None: raw text
        chat = None if args.raw else chat_format(engine.tokenizer)
        full_ids = _encode(engine.tokenizer, chat, args.prompt, args.system)
        comp_ids = _encode(engine.tokenizer, chat, args.compressed_prompt, args.system) if args.compressed_prompt else full_ids
        if chat is not None:  # a base model's plain transcript ends a reply where the next user turn begins
            config = replace(config, stop=[*config.stop, *chat.stop])
        text = []
        for chunk in engine.stream(full_ids, comp_ids, config):
            text.append(chunk.text)
            if not args.json:
                print(chunk.text, end="", flush=True)
    except AsymSpecError as exc:
        print(f"asymspec: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"text": "".join(text), "finish_reason": chunk.finish_reason, "stats": chunk.stats.to_dict()}))
    else:
        print()
        print_stats(chunk.stats, chunk.finish_reason)
    return 0


def _encode(tokenizer, chat, prompt: str, system: str | None) -> list[int]:
    if chat is None:
        return tokenizer(prompt, add_special_tokens=False)["input_ids"]
    turns = ([("system", system)] if system else []) + [("user", prompt)]
    return tokenizer("".join(chat.segments(turns)) + chat.generation_prompt(turns), add_special_tokens=False)["input_ids"]


def print_stats(stats, finish_reason: str | None = None) -> None:
    """A rich table of one call's speculation stats."""
    from rich.console import Console
    from rich.table import Table

    summary = Table(title=f"asymspec · mode {stats.mode}", show_header=False)
    rows = [
        ("finish reason", str(finish_reason)),
        ("prompt tokens (full / compressed)", f"{stats.prompt_tokens_full} / {stats.prompt_tokens_comp}"),
        ("new tokens", f"{stats.new_tokens} in {stats.wall_seconds:.2f} s ({stats.new_tokens / max(stats.wall_seconds, 1e-9):.1f} tok/s)"),
        ("drafted / accepted", f"{stats.drafted} / {stats.accepted} ({stats.acceptance_rate:.0%})"),
        ("blocks; accepted length histogram", f"{stats.blocks}; {dict(sorted(stats.accepted_lengths.items()))}"),
        ("gate-only acceptances", str(stats.gate_only_accepts)),
        ("mean / max |δ| at draft token", f"{stats.delta_abs_mean:.3f} / {stats.delta_abs_max:.3f}"),
        ("mean / max JSD", f"{stats.jsd_mean:.4f} / {stats.jsd_max:.4f}"),
        ("decision points (at slot 0)", f"{stats.decision_points} ({stats.decision_points_at_slot0})"),
        ("vocabulary-bridge re-encodings", str(stats.bridge_resyncs)),
        ("verifier / drafter GFLOPs", f"{stats.flops('verifier') / 1e9:.2f} / {stats.flops('drafter') / 1e9:.2f}"),
    ]
    for name, value in rows:
        summary.add_row(name, value)
    streams = Table(title="KV streams")
    for column in ("stream", "reused", "prefill tok", "decode tok", "forwards", "seconds"):
        streams.add_column(column, justify="right")
    for name, s in stats.streams.items():
        streams.add_row(name, str(s.reused_tokens), str(s.prefill_tokens), str(s.decode_tokens),
                        str(s.prefill_forwards + s.decode_forwards), f"{s.seconds:.2f}")
    console = Console()
    console.print(summary)
    console.print(streams)


if __name__ == "__main__":
    sys.exit(main())
