"""The drafter alone as it drafts: greedy on its full view of NIAH items, its rows as they are and with its copy head
(engine/copying.py: prompt lookup of the reply's own n-grams, mixed in with weight λ), the product's own streams.

    python experiments/long-drafter/alone_copy.py OUT [--drafter bundled-agent-small] [--weights 0 0.9]
        [--lengths 1000 3000 5000 7000] [--depths 17 50 83]

`asymspec bench niah`'s "alone" system decodes the drafter as a verifier, without its copy head (λ = 0 here). With
λ > 0 this is what the drafter proposes when nothing corrects it: the copy head joins in once the reply has begun to
echo the needle's sentence. Writes OUT/results.json and prints found/items per needle kind, λ and length.
"""

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

from asymspec_agents.bench import niah
from asymspec_agents.chat import AsymSpecChat
from asymspec_agents.engine import AsymSpecEngine
from asymspec_agents.engine.copying import CopyingStream
from asymspec_agents.engine.streams import KVStream

MAX_NEW_TOKENS = 32


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--verifier", default="bundled-agent", help="whose chat template and tokenizer")
    parser.add_argument("--drafter", default="bundled-agent-small")
    parser.add_argument("--weights", type=float, nargs="+", default=[0.0, 0.9])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 3000, 5000, 7000])
    parser.add_argument("--depths", type=int, nargs="+", default=[17, 50, 83])
    args = parser.parse_args()
    engine = AsymSpecEngine.shared(args.verifier, args.drafter)
    chat = AsymSpecChat(engine)
    haystack = niah.Haystack(engine.tokenizer)
    records = []
    started = time.time()
    for length in args.lengths:
        for depth in args.depths:
            for needle in niah.NEEDLES:
                item = haystack.item(needle, length, depth)
                ids = chat.context.render(item.messages, query=item.query).full_ids
                for weight in args.weights:
                    text = decode(engine, ids, weight)
                    records.append({"needle": needle.name, "kind": needle.kind, "length": length, "depth": depth,
                                    "copy_weight": weight, "correct": item.correct(SimpleNamespace(text=text)),
                                    "reply": text})
                    print(f"{needle.name:9} {length:5} {depth:3} λ={weight:g} {records[-1]['correct']!s:5} {text!r:.90}",
                          flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({"drafter": args.drafter, "minutes": (time.time() - started) / 60,
                                                  "records": records}, indent=1))
    table(records)


def decode(engine, ids: list[int], weight: float) -> str:
    """Greedy: the drafter's full-view rows, with its copy head where `weight` > 0; stops at EOS."""
    stream = KVStream(engine.drafter, "drafter", "full", engine.vocab_size)
    reader = CopyingStream(stream, ids, weight) if weight else stream
    reader.sync(ids)
    token, out = ids[-1], []
    for _ in range(MAX_NEW_TOKENS):
        token = int(reader.forward([token], keep=1)[-1].argmax())
        if token == engine.tokenizer.eos_token_id:
            break
        out.append(token)
    return engine.tokenizer.decode(out, skip_special_tokens=True)


def table(records):
    cells = defaultdict(list)
    for r in records:
        cells[(r["kind"], r["copy_weight"], r["length"])].append(r["correct"])
    for (kind, weight, length), found in sorted(cells.items()):
        print(f"{kind:8} λ={weight:<4g} {length:5}  {sum(found)}/{len(found)}")
    for kind in ("strict", "classic"):
        for weight in sorted({r["copy_weight"] for r in records}):
            found = [r["correct"] for r in records if r["kind"] == kind and r["copy_weight"] == weight]
            print(f"{kind:8} λ={weight:<4g} all    {sum(found)}/{len(found)} = {sum(found) / len(found):.2f}")


if __name__ == "__main__":
    main()
