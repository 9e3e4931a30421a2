"""The `asymspec` command: `generate`, `serve`, `bench NAME`, `train-drafter`, `distill-drafter` and `train-agent`."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from . import arguments
from .errors import AsymSpecError

# benchmark name -> (module of asymspec_agents.bench, what it measures); the accuracy module serves four names
BENCHMARKS = {
    "throughput": ("throughput", "tokens/s of each mode vs transformers' generate"),
    "accuracy": ("accuracy", "accuracy recovered under both rules, with cost"),
    "cost": ("accuracy", "the same runs, read for FLOPs and wall time"),
    "scaling": ("accuracy", "latency of a 12-step agent as its history grows"),
    "all": ("accuracy", "accuracy, cost and scaling"),
    "compression": ("compression", "compressors: ratio, speed, fact survival"),
    "precision": ("precision", "logit error per verification slot, KV dtypes"),
    "decisions": ("decisions", "decision-point scheduling on and off"),
    "drafters": ("drafters", "a drafter's cost per token against its verifier"),
    "serve": ("serve", "latency and throughput of many clients, in process and over HTTP"),
    "niah": ("niah", "needle in a haystack on Paul Graham's essays, heatmaps"),
    "soak": ("soak", "minutes of clients, cancellations and bad requests; memory"),
    "remote": ("remote", "models on vLLM servers vs in process (make vllm-venv)"),
    "bfcl": ("bfcl", "tool calling on BFCL's items and AST checker (bfcl-eval)"),
    "profile": ("profile", "where a reply's seconds go: streams and phases vs the Ceiling"),
}


TRAINERS = {"distill-drafter": "asymspec_agents.training.distill.run",
            "train-agent": "asymspec_agents.training.agent.run",
            "train-drafter": "asymspec_agents.training.adversarial"}


def run_command(command, argv: list[str]) -> int:
    """A command's `main(argv)`; the project's errors end it with their message and exit status 2, not a
    traceback (the one place every `asymspec` command's errors are printed)."""
    try:
        return command(argv) or 0
    except AsymSpecError as exc:
        print(f"asymspec: error: {exc}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_generate(commands.add_parser("generate", help="decode one reply and print it with its speculation stats"))
    # add_help=False: `asymspec bench NAME -h` reaches the benchmark's own parser
    bench = commands.add_parser("bench", add_help=False,
                                help=f"run a benchmark ({', '.join(BENCHMARKS)}); `asymspec bench NAME -h`")
    bench.add_argument("name", nargs="?", choices=list(BENCHMARKS), metavar="NAME", help="one of the benchmarks below")
    # add_help=False: `asymspec train-drafter -h` reaches the trainer's own parser
    commands.add_parser("train-drafter", add_help=False,
                        help="train a drafter (LoRA, DPO) to be rejected at decision points; `asymspec train-drafter -h`")
    commands.add_parser("distill-drafter", add_help=False,
                        help="distil a cheaper drafter from the verifier's own layers; `asymspec distill-drafter -h`")
    commands.add_parser("train-agent", add_help=False,
                        help="tune a verifier to decide, call tools and answer (LoRA); `asymspec train-agent -h`")
    commands.add_parser("pair", add_help=False,
                        help="what a pair is, from configs and tokenizers only; `asymspec pair -h`")
    commands.add_parser("serve", add_help=False,
                        help="an OpenAI-compatible HTTP server over a pair (needs the `serve` extra); `asymspec serve -h`")
    args, rest = parser.parse_known_args(argv)
    if args.command == "serve":
        try:
            server = importlib.import_module("asymspec_agents.server.app")
        except ImportError as exc:
            print(f"asymspec serve: error: {exc}; it needs the serve extra: pip install 'asymspec-agents[serve]'",
                  file=sys.stderr)
            return 2
        return server.main(rest) or 0
    if args.command == "pair":
        return run_command(importlib.import_module("asymspec_agents.pair").main, rest)
    if args.command in TRAINERS:
        return run_command(importlib.import_module(TRAINERS[args.command]).main, rest)
    if args.command == "bench":
        if args.name is None:  # `asymspec bench` or `asymspec bench -h`: the list of benchmarks
            bench.print_help()
            print("\nbenchmarks:\n" + "\n".join(f"  {name:12s} {summary}" for name, (_, summary) in BENCHMARKS.items())
                  + "\n\n`asymspec bench NAME -h` lists a benchmark's own options.")
            return 0 if {"-h", "--help"} & set(rest) else 2
        module = BENCHMARKS[args.name][0]
        argv_rest = [args.name, *rest] if module == "accuracy" else rest
        return run_command(importlib.import_module(f"asymspec_agents.bench.{module}").main, argv_rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return run_command(lambda _: _generate(args), rest)


def _add_generate(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt", required=True, help="the user message (full view)")
    p.add_argument("--passage", action="append", default=[], metavar="FILE",
                   help="a document for the question (repeatable): the drafter reads it whole, the verifier "
                   "its query-aware compressed form (--passage-budget)")
    p.add_argument("--passage-budget", type=int, default=128, help="tokens of each passage the verifier reads "
                   "(default: 128)")
    p.add_argument("--drafter-budget", type=int, default=None, metavar="TOKENS",
                   help="the drafter reads each passage's BM25 selection for the prompt, at most TOKENS, instead of "
                   "all of it (a retrieval view; default: all of it)")
    p.add_argument("--compressed-prompt", help="the verifier's view of the prompt; default: the same as --prompt")
    p.add_argument("--system", help="an optional system message for both views")
    p.add_argument("--raw", action="store_true", help="use the prompts as raw text, without the chat template")
    arguments.add_pair(p)
    arguments.add_settings(p)
    p.add_argument("--json", action="store_true", help="print the result and stats as JSON instead of a table")


def _generate(args: argparse.Namespace) -> int:
    from .chat import with_turn_stops
    from .context.chat_format import chat_format
    from .engine import AsymSpecEngine, GenerationConfig
    from .errors import ConfigError

    if args.passage and (args.raw or args.compressed_prompt):
        raise ConfigError("--passage renders the chat views itself: leave out --raw and --compressed-prompt.")
    if args.drafter_budget is not None and not args.passage:
        raise ConfigError("--drafter-budget selects from passages: give --passage FILE too.")
    config = GenerationConfig(**arguments.settings(args))
    engine = AsymSpecEngine.from_pretrained(verifier=args.verifier, drafter=arguments.drafter(args),
                                            tokenizer=args.tokenizer, threads=args.threads)
    # the model's chat template, or the plain transcript for base models; None: raw text
    chat = None if args.raw else chat_format(engine.tokenizer)
    if args.passage:
        full_ids, comp_ids = _with_passages(engine, args)
    else:
        full_ids = _encode(engine.tokenizer, chat, args.prompt, args.system)
        comp_ids = _encode(engine.tokenizer, chat, args.compressed_prompt, args.system) if args.compressed_prompt else full_ids
    if chat is not None:
        config = with_turn_stops(config, chat)
    text, out = [], None if args.json else WrappedOutput()
    for chunk in engine.stream(full_ids, comp_ids, config):
        text.append(chunk.text)
        if out is not None:
            out.write(chunk.text)
    if out is not None:
        out.finish()
    if args.json:
        print(json.dumps({"text": "".join(text), "finish_reason": chunk.finish_reason, "stats": chunk.stats.to_dict()}))
    else:
        print()
        print_stats(chunk.stats, chunk.finish_reason)
    return 0


def _with_passages(engine, args: argparse.Namespace) -> tuple[list[int], list[int]]:
    """The two views of a question over documents: whole for the drafter, compressed for the verifier."""
    from pathlib import Path

    from .context import CompressionPolicy, DualContext, Passage, SystemMessage, UserMessage
    from .errors import InvalidInputError

    try:
        passages = [Passage(Path(name).read_text(encoding="utf-8"), source=name) for name in args.passage]
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"--passage: cannot read {exc.filename or 'a file'}: {exc}") from exc
    messages = ([SystemMessage(args.system)] if args.system else []) + [UserMessage(args.prompt, passages=passages)]
    policy = CompressionPolicy(budgets={"passage": args.passage_budget}, drafter_budget=args.drafter_budget)
    views = DualContext(engine.tokenizer, policy).render(messages)
    return views.full_ids, views.comp_ids


class WrappedOutput:
    """Streamed text printed in lines of at most `width` columns, broken between words (a word shows once whole)."""

    def __init__(self, width: int | None = None):
        import shutil

        self.width = width or min(80, shutil.get_terminal_size().columns)
        self.column = 0
        self._word = ""
        self._space = False  # a space is owed before the next word, unless that word starts a line

    def write(self, text: str) -> None:
        for char in text:
            if char == "\n":
                self.finish()
                print()
                self.column, self._space = 0, False
            elif char == " ":
                self.finish()
                self._space = self.column > 0
            else:
                self._word += char
        sys.stdout.flush()

    def finish(self) -> None:
        """Print the word still held."""
        if not self._word:
            return
        if self.column and self.column + self._space + len(self._word) > self.width:
            print()
            self.column = 0
        elif self._space:
            print(" ", end="")
            self.column += 1
        print(self._word, end="")
        self.column += len(self._word)
        self._word, self._space = "", False


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
        ("acceptance rule; gate-only accepts", f"{stats.acceptance or '-'}; {stats.gate_only_accepts}"),
        ("block ends: fused / verifier / drafts", "{} / {} / {}".format(
            *(stats.block_emissions.count(kind) for kind in ("fused", "verifier", "none")))),
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
