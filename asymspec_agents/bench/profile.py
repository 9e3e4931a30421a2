"""Where a reply's seconds go, the Ceiling and AsymSpec side by side in one run.

Per reply: wall seconds, and within them each stream's prefill and decoding (the drafter on the full view drafts,
the drafter on the verifier's view gives the contrast rows, the verifier verifies; a model on a server waits on HTTP
there), the rest (compression, the copy head, acceptance and the loop's bookkeeping), forwards and requests per
committed token. Ratios compare medians of the same items in the same process.
- niah: needle-in-a-haystack items (Paul Graham's essays, the access-code needle at depths 25/50/75%) at each
  --lengths, read from empty caches: what reading a new long document costs. The verifier's view: head/tail 4x.
- agent: warm conversations; every turn brings a new --tool-tokens tool output (an essay page with a fact to find)
  into caches that hold the conversation so far, then asks for the fact; the first turn (cold) is not counted.
  The verifier's view: the default policy (tool results BM25-selected to 256 tokens).
Writes OUT.json, OUT.md and OUT.png.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

import torch
from tqdm import tqdm

from ..models import AUTO, DEFAULT_VERIFIER, resolve_pair
from ..plotting import pyplot
from .common import RESULTS, markdown_table, median, terminal_table, write_json, write_report

SYSTEMS = {"ceiling": {"mode": "full"}, "asymspec": {}}  # the verifier alone on the full view; AsymSpec's defaults
PHASES = ("prefill", "draft", "contrast", "verify", "other")
DEPTHS = (25, 50, 75)
PLACES = ("harbour archive", "north gate", "seed vault", "radio room", "boat shed", "map library", "signal tower",
          "east wing")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="asymspec bench profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verifier", default=DEFAULT_VERIFIER, help="a name, folder or http://host:port/v1")
    parser.add_argument("--drafter", default=AUTO, help="default: auto (the verifier's matched drafter)")
    parser.add_argument("--scenarios", nargs="+", choices=("niah", "agent"), default=["niah", "agent"])
    parser.add_argument("--lengths", type=int, nargs="+", default=[3000, 5000, 7000],
                        help="niah context lengths in tokens (default 3000 5000 7000)")
    parser.add_argument("--conversations", type=int, default=2, help="agent conversations (default 2)")
    parser.add_argument("--turns", type=int, default=3, help="turns per conversation (default 3: two warm)")
    parser.add_argument("--tool-tokens", type=int, default=2000, help="tokens of each tool output (default 2000)")
    parser.add_argument("--reply-tokens", type=int, default=32, help="most tokens per reply (default 32)")
    parser.add_argument("--out", default=str(RESULTS / "profile"),
                        help=f"output prefix of the .json, .md and .png (default {RESULTS / 'profile'})")
    args = parser.parse_args(argv)
    from ..engine import AsymSpecEngine
    from .niah import Haystack

    engine = AsymSpecEngine.shared(args.verifier, args.drafter)
    if engine.drafter is None:
        parser.error("the profile compares AsymSpec with the Ceiling: give --drafter a model, not none")
    need = args.turns * (args.tool_tokens + 120) + args.reply_tokens
    if "agent" in args.scenarios and need > engine.context_window:
        parser.error(f"{args.turns} turns of {args.tool_tokens}-token tool outputs need ~{need} tokens, past the "
                     f"window of {engine.context_window}: lower --turns or --tool-tokens")
    if "niah" in args.scenarios and max(args.lengths) + args.reply_tokens > engine.context_window:
        parser.error(f"--lengths go past the window of {engine.context_window}")
    # the Ceiling on an engine of its own (the same models): each system's conversations keep their own caches
    engines = {"ceiling": AsymSpecEngine(engine.verifier, None, engine.tokenizer), "asymspec": engine}
    haystack = Haystack(engine.tokenizer)  # the essays tokenized once, for both scenarios
    records = []
    if "niah" in args.scenarios:
        records += profile_niah(engines, haystack, args.lengths, args.reply_tokens)
    if "agent" in args.scenarios:
        records += profile_agent(engines, haystack, args.conversations, args.turns, args.tool_tokens,
                                 args.reply_tokens)
    verifier, drafter = resolve_pair(args.verifier, args.drafter)
    report = {"verifier": str(verifier), "drafter": str(drafter), "date": time.strftime("%Y-%m-%d"),
              "threads": torch.get_num_threads(), "load_average": list(os.getloadavg()),
              "settings": vars(args), "summary": summarize(records), "records": records}
    write_json(Path(args.out + ".json"), report)
    write_report(args.out + ".md", render(report), lambda: plot(report, args.out + ".png"))
    print(render(report, terminal=True))
    return 0


# -- scenarios ---------------------------------------------------------------------------------------------------

def profile_niah(engines: dict, haystack, lengths: list[int], reply_tokens: int) -> list[dict]:
    from ..chat import AsymSpecChat
    from ..context import CompressionPolicy
    from .niah import NEEDLES, PROMPT_TOKENS

    needle = next(n for n in NEEDLES if n.name == "code")
    records = []
    with tqdm(total=len(lengths) * len(DEPTHS) * len(SYSTEMS), desc="profile niah", unit="reply") as bar:
        for length in lengths:
            policy = CompressionPolicy(budgets={"passage": (length - PROMPT_TOKENS) // 4},
                                       compressors={"passage": "head_tail"})
            chats = {name: AsymSpecChat(engine, policy=policy) for name, engine in engines.items()}
            for depth in DEPTHS:
                item = haystack.item(needle, length, depth)
                for name, chat in chats.items():
                    chat.engine.reset()  # cold: the document is new to every stream
                    reply, seconds = _timed(chat, item.messages, SYSTEMS[name], reply_tokens)
                    records.append({"scenario": f"niah {length // 1000}k", "system": name, "item": item.id,
                                    "correct": item.correct(reply), **breakdown(reply, seconds)})
                    bar.update()
    return records


def profile_agent(engines: dict, haystack, conversations: int, turns: int, tool_tokens: int,
                  reply_tokens: int) -> list[dict]:
    from ..chat import AsymSpecChat
    from ..context import AssistantMessage, SystemMessage, ToolCall, ToolResult, UserMessage
    from .niah import Needle

    records = []
    with tqdm(total=conversations * turns * len(SYSTEMS), desc="profile agent", unit="reply") as bar:
        for c in range(conversations):
            rng = random.Random(f"profile-agent-{c}")
            chats = {name: AsymSpecChat(engine) for name, engine in engines.items()}
            history = {name: [SystemMessage("Answer from the tool results. Keep your answers short.")]
                       for name in SYSTEMS}
            for turn in range(turns):
                place, code = PLACES[(c * turns + turn) % len(PLACES)], str(rng.randint(1000, 9999))
                needle = Needle(place, "strict", f"The access code of the {place} is {code}.",
                                f"What is the access code of the {place}?", (code,))
                offset = (c * turns + turn) * tool_tokens  # a new page every turn
                page = haystack.document(needle, tool_tokens, rng.choice(DEPTHS), offset=offset)
                call = ToolCall(f"call_{c}_{turn}", "read_page", {"page": offset // tool_tokens})
                new = [UserMessage(f"Read page {offset // tool_tokens}. {needle.question}"),
                       AssistantMessage(tool_calls=[call]), ToolResult(call.id, call.name, page),
                       UserMessage(f"Now answer: {needle.question}")]
                for name, chat in chats.items():
                    history[name] += new
                    reply, seconds = _timed(chat, history[name], SYSTEMS[name], reply_tokens)
                    history[name].append(AssistantMessage(reply.text))
                    if turn:  # the first turn reads the conversation cold
                        records.append({"scenario": f"agent {tool_tokens / 1000:g}k", "system": name,
                                        "item": f"conversation-{c}-turn-{turn}", "correct": code in reply.text,
                                        **breakdown(reply, seconds)})
                    bar.update()
    return records


def _timed(chat, messages, overrides: dict, reply_tokens: int):
    started = time.perf_counter()
    reply = chat.reply(messages, max_new_tokens=reply_tokens, **overrides)
    return reply, time.perf_counter() - started


def breakdown(reply, seconds: float) -> dict:
    """A reply's seconds by phase, its forwards and requests per committed token, its tokens and FLOPs."""
    stats = reply.stats
    streams = stats.streams.values()
    decode = {(s.role, s.view): s.seconds - s.prefill_seconds for s in streams}
    phases = {"prefill": sum(s.prefill_seconds for s in streams),
              "draft": decode.get(("drafter", "full"), 0.0),
              "contrast": decode.get(("drafter", "comp"), 0.0),
              "verify": sum(v for (role, _), v in decode.items() if role == "verifier")}
    phases["other"] = max(0.0, seconds - sum(phases.values()))
    tokens = max(1, stats.new_tokens)
    return {"seconds": seconds, "phases": phases, "new_tokens": stats.new_tokens,
            "forwards_per_token": sum(s.decode_forwards for s in streams) / tokens,
            "requests_per_token": sum(s.requests for s in streams) / tokens,
            "acceptance": stats.acceptance_rate if stats.drafted else None,
            "flops": stats.flops("verifier") + stats.flops("drafter"),
            "prefill_tokens": {f"{s.role} {s.view}": s.prefill_tokens for s in streams},
            "stream_seconds": {f"{s.role} {s.view}": {"prefill": s.prefill_seconds,
                                                      "decode": s.seconds - s.prefill_seconds} for s in streams}}


# -- report --------------------------------------------------------------------------------------------------------

def summarize(records: list[dict]) -> list[dict]:
    """Per scenario and system: medians, and seconds and FLOPs as a share of the Ceiling's (ratio of medians)."""
    rows = []
    for scenario in dict.fromkeys(r["scenario"] for r in records):
        ceiling = [r for r in records if r["scenario"] == scenario and r["system"] == "ceiling"]
        for system in SYSTEMS:
            own = [r for r in records if r["scenario"] == scenario and r["system"] == system]
            if not own:
                continue
            row = {"scenario": scenario, "system": system, "replies": len(own),
                   "right": sum(r["correct"] for r in own),
                   "seconds": median([r["seconds"] for r in own]),
                   "phases": {p: median([r["phases"][p] for r in own]) for p in PHASES},
                   "forwards_per_token": median([r["forwards_per_token"] for r in own]),
                   "requests_per_token": median([r["requests_per_token"] for r in own]),
                   "new_tokens": median([r["new_tokens"] for r in own]),
                   "acceptance": median([r["acceptance"] for r in own if r["acceptance"] is not None])}
            if ceiling:
                row["time_ratio"] = row["seconds"] / median([r["seconds"] for r in ceiling])
                row["flops_ratio"] = median([r["flops"] for r in own]) / median([r["flops"] for r in ceiling])
            rows.append(row)
    return rows


def render(report: dict, terminal: bool = False) -> str:
    header = ["scenario", "system", "s/reply", "×C s", "×C FLOPs", *PHASES, "fwd/tok", "right"]
    rows = [[r["scenario"], r["system"], f"{r['seconds']:.2f}", f"{r.get('time_ratio', float('nan')):.2f}",
             f"{r.get('flops_ratio', float('nan')):.2f}", *(f"{r['phases'][p]:.2f}" for p in PHASES),
             f"{r['forwards_per_token']:.1f}", f"{r['right']}/{r['replies']}"] for r in report["summary"]]
    if terminal:  # 80 columns: the phases' seconds without the FLOPs ratio
        keep = [i for i, name in enumerate(header) if name not in ("×C FLOPs", "right")]
        return terminal_table([header[i] for i in keep], [[row[i] for i in keep] for row in rows], left=2)
    return (f"# Where a reply's seconds go ({report['date']}, {report['threads']} torch threads, load "
            f"{report['load_average'][0]:.1f})\n\nVerifier `{report['verifier']}`, drafter `{report['drafter']}`. "
            "Medians per scenario; ×C: AsymSpec's median over the Ceiling's (the verifier alone on the full view) on "
            "the same items in this run. Phases in seconds: prefill (every stream), draft (the drafter on the full "
            "view decoding), contrast (the drafter on the verifier's view), verify (the verifier's block forwards), "
            "other (compression, the copy head, acceptance, bookkeeping); fwd/tok: decoding forwards of all streams "
            "per committed token.\n\n" + markdown_table(header, rows))


def plot(report: dict, path: str) -> None:
    plt = pyplot()
    rows = report["summary"]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.2))
    labels = [f"{r['scenario']} · {r['system']}" for r in rows]
    left = [0.0] * len(rows)
    for phase in PHASES:
        widths = [r["phases"][phase] for r in rows]
        ax.barh(labels, widths, left=left, label=phase)
        left = [a + b for a, b in zip(left, widths)]
    ax.invert_yaxis()
    ax.set_xlabel("seconds per reply (medians by phase)")
    ax.legend(fontsize=8, ncols=len(PHASES), loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
