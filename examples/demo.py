"""The idea in one run: a question whose answer lies deep in a long retrieved document, answered four ways.

A retrieval step hands AsymSpecLLM (LlamaIndex) one retrieved document as a passage: about 1.7k tokens of real
text (sections of Python's language reference) with one line that matters, planted at a random depth. The
verifier's memory keeps only the head and tail of each passage (a quarter of it by default), as a context-trimming
pipeline would. The same question is then answered by

  verifier alone     the default pair's verifier (`bundled-agent`, SmolLM2-135M tuned as an agent) on its compressed
                     memory (the Floor)
  AsymSpec, paper    that verifier on that memory, the distilled 6-layer `bundled-agent-small` drafting from the whole
                     document, with the published ratio rule and defaults (the bonus token after an accepted
                     block is the verifier's own, unfused: `fuse_bonus=False`)
  AsymSpec           the default pair as every entry point runs it: the same with that bonus token fused
  verifier, all      the verifier reading everything (the Ceiling)

each from empty caches, with the numbers its answer gives, wall time and total FLOPs (drafter + verifier). Nothing
is scripted: if a system gets the code wrong, the table says so. `asymspec bench accuracy --pair bundled-agent`
measures the same over many documents (docs/benchmarks.md).

    python examples/demo.py [--seed 0] [--chars 7000] [--ratio 4]
"""

from __future__ import annotations

import argparse
import random
import re
import time

from llama_index.core.llms import ChatMessage
from llama_index.llms.asymspec import AsymSpecLLM
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from asymspec_agents import AsymSpecEngine
from asymspec_agents.context import CompressionPolicy

SYSTEM = "Answer the question from the documents."
QUESTION = "What is the access code of the server room? Answer with the four-digit code."
SYSTEMS = {"verifier alone": dict(mode="compressed"), "AsymSpec, paper": dict(mode="asymmetric", fuse_bonus=False),
           "AsymSpec": dict(mode="asymmetric"), "verifier, all": dict(mode="full")}


def planted_document(rng: random.Random, chars: int) -> tuple[str, str]:
    """Real text with one planted fact at a random depth; returns (document, the code)."""
    from pydoc_data.topics import topics

    sections = [" ".join(text.split()) for text in topics.values() if 600 < len(text) < 3000]
    parts, total = [], 0
    while total < chars:
        parts.append(rng.choice(sections))
        total += len(parts[-1])
    code = str(rng.randint(1000, 9999))
    parts.insert(rng.randint(1, len(parts) - 1), f"The access code of the server room is {code}.")
    return "\n\n".join(parts), code


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chars", type=int, default=7000, help="length of the document (characters)")
    parser.add_argument("--ratio", type=int, default=4, help="the verifier keeps 1/ratio of each passage")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    console = Console(width=80)
    report, code = planted_document(random.Random(args.seed), args.chars)
    engine = AsymSpecEngine.shared()  # the default pair; the first run assembles its models (seconds)
    tokens = len(engine.tokenizer(report)["input_ids"])
    memory = CompressionPolicy(budgets={"passage": tokens // args.ratio}, compressors={"passage": "head_tail"})
    messages = [ChatMessage(role="system", content=SYSTEM),
                ChatMessage(role="user", content=QUESTION,
                            additional_kwargs={"passages": [{"text": report, "source": "facility notes"}]})]
    console.print(f"[bold]Question:[/bold] {QUESTION}")
    console.print(f"The retrieved document has {tokens} tokens; the planted code is {code}; the verifier's memory "
                  f"keeps {tokens // args.ratio} of them (head and tail).\n")
    table = Table(title="One question, answered four ways (from empty caches)", width=80)
    for column, justify, width in (("system", "left", 15), ("numbers given", "left", None), ("right", "center", 5),
                                   ("s", "right", 5), ("GFLOPs", "right", 6), ("accept", "right", 6)):
        table.add_column(column, justify=justify, no_wrap=True, overflow="ellipsis", min_width=width,
                         ratio=None if width else 1)
    for name, settings in SYSTEMS.items():
        llm = AsymSpecLLM(engine=engine, policy=memory, max_new_tokens=args.max_tokens, **settings)
        engine.reset()
        started = time.perf_counter()
        response = llm.chat(messages)
        seconds = time.perf_counter() - started
        answer, stats = (response.message.content or "").strip(), response.raw["stats"]
        flops = (stats["verifier_flops"] + stats["drafter_flops"]) / 1e9
        accept = f"{stats['accepted'] / stats['drafted']:.0%}" if stats["drafted"] else "—"
        given = re.findall(r"\d+", answer)  # what a reader takes from the answer: every number in it
        table.add_row(name, ", ".join(given) or "none", "yes" if code in given else "no", f"{seconds:.1f}",
                      f"{flops:.0f}", accept)
        console.print(f"[cyan]{name}[/cyan]: {escape(answer)}\n")
    console.print(table)


if __name__ == "__main__":
    main()
