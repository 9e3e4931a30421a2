"""The `asymspec train-agent` command: teach a verifier to act as an agent, with a LoRA delta on all its layers.

    asymspec train-agent --out runs/agent            # the shipped bundled-agent's recipe (its defaults)
    asymspec train-agent --examples 1200 --near-misses 0 --twins 0 --unstated 0 --near-company 0 \
        --no-right-reads --out runs/agent-2026-12-04  # the 2026-12-04 bundled-agent's

Data: conversations over invented tools (`catalogue`, `transcripts`): decide whether an offered tool is needed, call
it with the values the question states, answer from its result in words and stop, say so when no offered tool fits,
report a tool's failure. Replies to general questions are the raw model's own (decoded here once, no tools offered),
so that training teaches when not to call without teaching new answers; so are the replies to questions over
documents and long tool outputs (`--reads`, decoded in the view each is trained in), so that tuning leaves the
model's reading, of a whole or of a compressed context, as it was. Nothing comes from BFCL or the examples.

Training: next-token cross-entropy on the assistant turns only; LoRA factors on every linear map of every layer and
the layers' norms (`training.distill.train.trainable_student` with all layers "trained"); the delta ships like
bundled-small's (student.json + delta.safetensors) and is merged on load. Report: on held-out tools (never in a
training conversation) and held-out general questions, each conversation's first reply decoded under
tool_choice="auto" by the raw and the tuned model (right decision, right tool, exact arguments) and its final
answer given the tool result (states the result, no markup); on held-out readings, whether the reply states the
planted value and copies no document markup, per view; on held-out lookups (`lookups`: a search of Python's
reference, its whole section as the result), whether the answer names what the section gives; plus the loss curve.
The loss curve and `train.json` (losses, seconds, settings) are written as soon as training ends; the report takes
~20 min more on 2 cores, and `--report-only` writes it later for the adapter already in `--out` (the same options
that trained it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import re
import statistics
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

from ...errors import AsymSpecError

GENERAL_TOKENS = 64  # a general question's reply: the raw model's first sentences within this many tokens
READ_TOKENS = 48  # a reply over documents: the planted facts are short values


def main(argv: list[str] | None = None) -> int:
    report = run(build_parser().parse_args(argv))
    print(render_markdown(report))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asymspec train-agent", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verifier", default="bundled", help="the model to tune (default: bundled)")
    parser.add_argument("--examples", type=int, default=2400, help="training conversations")
    parser.add_argument("--reads", type=int, default=240, help="training conversations over documents and tool "
                        "outputs, with the raw model's own replies")
    parser.add_argument("--near-misses", type=float, default=0.04,
                        help="share of conversations whose offered tools are near the question's topic but none fits "
                             "(taken from the off-topic share, 0.22; default %(default)s; the 2026-12-04 recipe, with "
                             "no near misses, twins, unstated questions or near company, is in the description)")
    parser.add_argument("--twins", type=float, default=0.10,
                        help="share of conversations offering a tool asked, with its own argument values, for what "
                             "it does not do (also taken from the off-topic share; default %(default)s)")
    parser.add_argument("--unstated", type=float, default=0.03,
                        help="share of conversations asking for a tool's task without the values its arguments need, "
                             "answered by asking for them (also taken from the off-topic share; default %(default)s)")
    parser.add_argument("--near-company", type=float, default=0.5,
                        help="share of the call conversations that offer the fitting tool beside tools near its topic "
                             "(of its domain and the neighbouring ones) rather than of any domain; default %(default)s")
    parser.add_argument("--right-reads", action=argparse.BooleanOptionalAction, default=True,
                        help="train only on the readings whose raw reply states the planted value (--no-right-reads: "
                             "all, as the 2026-12-04 recipe)")
    parser.add_argument("--dev", type=int, default=80, help="held-out conversations for the report")
    parser.add_argument("--dev-reads", type=int, default=24, help="held-out readings for the report")
    parser.add_argument("--dev-lookups", type=int, default=13,
                        help="held-out lookups for the report (of the 13 in training.agent.lookups)")
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank")
    parser.add_argument("--alpha", type=float, default=32.0)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--accumulate", type=int, default=8, help="conversations per optimizer step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument("--device", default="cpu", help="where to train and evaluate: cpu (default) or cuda; the "
                        "delta has the same format either way")
    parser.add_argument("--out", default="runs/agent", help="output folder (student.json, delta, report, loss plot)")
    parser.add_argument("--report-only", action="store_true",
                        help="do not train: write the report for the adapter already in --out (give the options "
                             "that trained it: they draw the same conversations)")
    return parser


TRAIN_FILE = "train.json"  # the loss of every step, training seconds and the options, written when training ends
# what decides the adapter and report
RECIPE = ("verifier", "examples", "reads", "near_misses", "twins", "unstated", "near_company", "right_reads", "dev",
          "dev_reads", "dev_lookups", "rank", "alpha", "epochs", "lr", "accumulate", "seed")


def run(args: argparse.Namespace) -> dict:
    import torch

    from ...context import DualContext
    from ...models import load_model
    from ...models.students import StudentSpec, assemble_student
    from .transcripts import conversations, held_out_conversations, readings, render, split_questions, split_tools

    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_model(args.verifier, device=args.device)
    layers = model.config.num_hidden_layers
    spec = StudentSpec(trunk=0, top=tuple(range(layers)), rank=args.rank, alpha=args.alpha,
                       extra={"verifier": args.verifier, "examples": args.examples, "seed": args.seed,
                              "data": "invented tools: calls, answers from results, no-tool questions, tool errors; "
                                      "readings of documents and tool outputs with the raw model's replies"})
    recipe = {key: getattr(args, key) for key in RECIPE}
    # checked before any raw reply is decoded: a wrong --out fails in seconds, not after minutes of decoding
    history = _trained(out, spec, recipe) if args.report_only else None
    train_tools, dev_tools = split_tools()
    train_questions, _ = split_questions()
    answers = GeneralAnswers(model, tokenizer, out / "general_answers.json")
    read_answers = ReadAnswers(model, tokenizer, out / "read_answers.json")
    shares = {"near_misses": args.near_misses, "twins": args.twins, "unstated": args.unstated,
              "near_company": args.near_company}
    train_set = conversations(args.examples, args.seed, train_tools, train_questions, answers, **shares)
    # readings draw from their own seeds: adding them leaves the other conversations as they were
    reads = readings(args.reads, args.seed + 500, tokenizer, train_tools, read_answers)
    train_set += [c for c in reads if not args.right_reads or _states_planted(c)]
    dev_set = held_out_conversations(args.dev, args.seed, answers, **shares)
    dev_reads = readings(args.dev_reads, args.seed + 10_500, tokenizer, dev_tools)
    context = DualContext(tokenizer)
    rendered = [render(context, c, tokenizer) for c in train_set]
    if history is None:
        started = time.perf_counter()
        history = train(model, spec, rendered, out, args)
        history.update(train_seconds=time.perf_counter() - started, recipe=recipe)
        (out / TRAIN_FILE).write_text(json.dumps(history, indent=2) + "\n")
        plot_losses(history, out / "loss.png")
    tuned = assemble_student(model, out)
    report = {"spec": asdict(spec), "settings": {k: v for k, v in vars(args).items() if k != "threads"},
              "train_conversations": len(train_set), "kinds": dict(Counter(c.kind for c in train_set)),
              "train_tokens": sum(len(r.ids) for r in rendered),
              "target_tokens": sum(b - a for r in rendered for a, b in r.spans),
              "train_seconds": history.get("train_seconds"), "dev_tools": [t.name for t in dev_tools],
              "dev": {"raw": evaluate(model, tokenizer, dev_set, "raw"), "tuned": evaluate(tuned, tokenizer, dev_set, "tuned")},
              "dev_reads": {"raw": evaluate_reads(model, tokenizer, dev_reads, "raw"),
                            "tuned": evaluate_reads(tuned, tokenizer, dev_reads, "tuned")},
              "lookups": {"raw": evaluate_lookups(model, tokenizer, args.dev_lookups, "raw"),
                          "tuned": evaluate_lookups(tuned, tokenizer, args.dev_lookups, "tuned")},
              "date": time.strftime("%Y-%m-%d")}
    (out / "report.json").write_text(json.dumps({**report, "steps": history.get("steps", [])}, indent=2) + "\n")
    (out / "report.md").write_text(render_markdown(report))
    return report


def _states_planted(conversation) -> bool:
    """Whether a reading's reply states the value planted in its documents (true where none was planted)."""
    value = conversation.expected["value"]
    return not value or value in conversation.messages[-1].content


def _trained(out: Path, spec, recipe: dict) -> dict:
    """For --report-only: the adapter in `out` must be the one these options train; its training history if kept."""
    from ...models.students import DELTA_FILE, SPEC_FILE, StudentSpec

    if not (out / DELTA_FILE).is_file() or not (out / SPEC_FILE).is_file():
        raise AsymSpecError(f"--report-only needs a trained adapter in {out} ({SPEC_FILE} and {DELTA_FILE}); "
                            "train one first (the same command without --report-only).")
    if StudentSpec.from_json((out / SPEC_FILE).read_text()) != spec:
        raise AsymSpecError(f"The adapter in {out} was not trained with these options ({SPEC_FILE} differs); "
                            "give the options that trained it.")
    history = json.loads((out / TRAIN_FILE).read_text()) if (out / TRAIN_FILE).is_file() else {}
    differ = sorted(key for key, value in history.get("recipe", recipe).items() if recipe.get(key) != value)
    if differ:
        raise AsymSpecError(f"The adapter in {out} was trained with other values of {', '.join(differ)} "
                            f"({TRAIN_FILE}); give the options that trained it.")
    return history


class _RawReplies:
    """The raw model's replies, each decoded once and kept in the JSON file `cache` (a rerun decodes none again)."""

    def __init__(self, model, tokenizer, cache: Path):
        from ...engine import AsymSpecEngine

        self.cache = cache
        self.known = json.loads(cache.read_text()) if cache.is_file() else {}
        self.engine = AsymSpecEngine(model, None, tokenizer)

    def _kept(self, key: str, decode) -> str | None:
        if key not in self.known:
            self.known[key] = _whole_sentences(decode())
            self.cache.write_text(json.dumps(self.known, indent=2) + "\n")
        return self.known[key]


class GeneralAnswers(_RawReplies):
    """The raw model's own greedy reply to a general question (no tools offered), cut after its last full sentence
    within GENERAL_TOKENS (None when there is none); keyed by the question."""

    def __init__(self, model, tokenizer, cache: Path):
        from ...chat import AsymSpecChat
        from ...engine import GenerationConfig

        super().__init__(model, tokenizer, cache)
        self.chat = AsymSpecChat(self.engine, config=GenerationConfig(mode="full", max_new_tokens=GENERAL_TOKENS))

    def __call__(self, question: str) -> str | None:
        return self._kept(question, lambda: self.chat.reply([{"role": "user", "content": question}]))


class ReadAnswers(_RawReplies):
    """The raw model's own greedy reply to a reading conversation, in the view it is trained in (the compressed view
    by the conversation's own policy), under its tools with no call allowed; whole sentences within READ_TOKENS
    (None when there is none); keyed by a hash of what the reply was decoded from."""

    def __call__(self, conversation) -> str | None:
        key = hashlib.sha256(repr((conversation.messages, conversation.tools, conversation.policy, conversation.query,
                                   conversation.view)).encode()).hexdigest()[:16]
        return self._kept(key, lambda: _read_reply(self.engine, conversation))


def _read_reply(engine, conversation):
    from ...chat import AsymSpecChat

    chat = AsymSpecChat(engine, policy=conversation.policy)
    return chat.reply(conversation.messages, tools=conversation.tools or None,
                      tool_choice="none" if conversation.tools else None, query=conversation.query,
                      mode="full" if conversation.view == "full" else "compressed", max_new_tokens=READ_TOKENS)


def _whole_sentences(reply) -> str | None:
    """A reply's text; cut after its last full sentence when it ran out of tokens (None: nothing left)."""
    text = reply.text.strip()
    if reply.finish_reason != "stop":
        cut = max(text.rfind(". "), text.rfind(".\n"), text.rfind("! "), text.rfind("? "))
        text = text[:cut + 1] if cut > 0 else ""
    return text or None


def train(model, spec, rendered: list, out: Path, args) -> dict:
    """Cross-entropy on the assistant spans; writes student.json and delta.safetensors into `out`."""
    import torch
    from safetensors.torch import save_file
    from tqdm import tqdm

    from ...models.students import DELTA_FILE, SPEC_FILE
    from ..distill.train import delta_of, trainable_student

    torch.manual_seed(args.seed)
    student = trainable_student(model, spec).train()
    device = next(student.parameters()).device
    params = [p for p in student.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0)
    total_steps = math.ceil(args.epochs * len(rendered) / args.accumulate)
    schedule = torch.optim.lr_scheduler.LambdaLR(  # a short warm-up, then cosine to 10%
        optimizer, lambda step: min(1.0, (step + 1) / 10) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / total_steps))))
    history = {"steps": []}
    bar = tqdm(total=args.epochs * len(rendered), desc="train-agent", unit="conversation")
    for epoch in range(args.epochs):
        order = list(range(len(rendered)))
        random.Random(args.seed * 1000 + epoch).shuffle(order)
        running, tokens = 0.0, 0
        for i, index in enumerate(order):
            example = rendered[index]
            # the head runs only where a target token is predicted: the vocabulary projection of every prompt
            # position would cost more than the adapter's gradients
            targets = torch.tensor([j for start, end in example.spans for j in range(start, end)], device=device)
            ids = torch.tensor(example.ids, device=device)
            hidden = student.model(input_ids=ids[None], use_cache=False).last_hidden_state[0]
            logits = student.lm_head(hidden[targets - 1]).float()
            loss = torch.nn.functional.cross_entropy(logits, ids[targets], reduction="sum")
            count = len(targets)
            (loss / count / args.accumulate).backward()
            running, tokens = running + float(loss.detach()), tokens + count
            if (i + 1) % args.accumulate == 0 or i + 1 == len(order):
                torch.nn.utils.clip_grad_norm_(params, 1.0)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad()
                history["steps"].append({"epoch": epoch + (i + 1) / len(order), "loss": running / max(tokens, 1)})
                bar.set_postfix(loss=f"{history['steps'][-1]['loss']:.3f}")
                running, tokens = 0.0, 0
            bar.update()
    bar.close()
    # float16 halves the file (30 layers of factors); merged in float32 on load, the error is far below training's
    save_file({name: tensor.half().cpu() for name, tensor in delta_of(student, spec).items()}, str(out / DELTA_FILE))
    (out / SPEC_FILE).write_text(spec.to_json())
    return history


def evaluate(model, tokenizer, dev_set, label: str = "model") -> dict:
    """Each held-out conversation's first reply under tool_choice="auto" (decision, tool, arguments) and, where a
    tool result comes, the final reply given it (states the result's value, carries no markup, ends)."""
    from tqdm import tqdm

    from ...chat import AsymSpecChat
    from ...context import ToolResult
    from ...engine import AsymSpecEngine, GenerationConfig

    chat = AsymSpecChat(AsymSpecEngine(model, None, tokenizer), config=GenerationConfig(mode="full", max_new_tokens=64))
    counts = {"conversations": 0, "decision": 0, "should_call": 0, "tool": 0, "arguments": 0, "no_call_wanted": 0,
              "no_call": 0, "answers": 0, "answer_states_value": 0, "answer_clean": 0}
    by_kind = {}  # kind -> (conversations that want no call, replies without one)
    for conversation in tqdm(dev_set, desc=f"held-out replies ({label})", unit="conversation"):
        expected = conversation.expected["calls"]
        first = chat.reply(conversation.messages[:1], tools=conversation.tools, tool_choice="auto")
        calls = [{"name": c.name, "arguments": c.arguments} for c in first.tool_calls]
        counts["conversations"] += 1
        counts["decision"] += bool(calls) == bool(expected)
        if expected:
            counts["should_call"] += 1
            counts["tool"] += bool(calls) and calls[0]["name"] == expected[0]["name"]
            counts["arguments"] += calls[:1] == expected[:1]
        else:
            counts["no_call_wanted"] += 1
            counts["no_call"] += not calls
            wanted, right = by_kind.get(conversation.kind, (0, 0))
            by_kind[conversation.kind] = (wanted + 1, right + (not calls))
        final = conversation.messages[-1]
        if conversation.kind in ("call", "chain", "parallel"):
            reply = chat.reply(conversation.messages[:-1], tools=conversation.tools, tool_choice="auto")
            results = [m.content for m in conversation.messages if isinstance(m, ToolResult)]
            counts["answers"] += 1
            counts["answer_states_value"] += all(_value_in(r, reply.text) for r in results[-1:])
            counts["answer_clean"] += (not reply.tool_calls and "<" not in reply.text and reply.finish_reason == "stop"
                                       and bool(final.content))
    rates = {"decision": counts["decision"] / max(counts["conversations"], 1),
             "tool": counts["tool"] / max(counts["should_call"], 1),
             "arguments": counts["arguments"] / max(counts["should_call"], 1),
             "no_call": counts["no_call"] / max(counts["no_call_wanted"], 1),
             "answer_states_value": counts["answer_states_value"] / max(counts["answers"], 1),
             "answer_clean": counts["answer_clean"] / max(counts["answers"], 1)}
    no_call_by_kind = {kind: {"n": n, "rate": right / n} for kind, (n, right) in sorted(by_kind.items())}
    return {"counts": counts, "rates": rates, "no_call_by_kind": no_call_by_kind}


def evaluate_reads(model, tokenizer, reads, label: str = "model") -> dict:
    """Each held-out reading's reply in its view: whether it states the planted value (where one was planted) and
    whether it copies no document markup."""
    from tqdm import tqdm

    from ...engine import AsymSpecEngine

    engine = AsymSpecEngine(model, None, tokenizer)
    counts = {view: {"replies": 0, "planted": 0, "found": 0, "clean": 0} for view in ("full", "comp")}
    for conversation in tqdm(reads, desc=f"held-out readings ({label})", unit="conversation"):
        text = _read_reply(engine, conversation).text
        tally = counts[conversation.view]
        tally["replies"] += 1
        tally["clean"] += "<document" not in text and "</document" not in text
        if conversation.expected["value"]:
            tally["planted"] += 1
            tally["found"] += conversation.expected["value"] in text
    rates = {view: {"found": c["found"] / max(c["planted"], 1), "clean": c["clean"] / max(c["replies"], 1)}
             for view, c in counts.items()}
    return {"counts": counts, "rates": rates}


def evaluate_lookups(model, tokenizer, count: int, label: str = "model") -> dict:
    """The first `count` held-out lookups (`lookups`: a search of Python's reference, its section as the result)
    answered with no further call allowed, in each view: whether the answer names the word the section gives."""
    from tqdm import tqdm

    from ...chat import AsymSpecChat
    from ...engine import AsymSpecEngine
    from .lookups import lookups

    chat = AsymSpecChat(AsymSpecEngine(model, None, tokenizer))
    counts = {view: {"questions": 0, "stated": 0} for view in ("full", "comp")}
    replies = []
    for conversation in tqdm(lookups()[:count], desc=f"held-out lookups ({label})", unit="question"):
        word = conversation.expected["value"]
        for view, mode in (("full", "full"), ("comp", "compressed")):
            text = chat.reply(conversation.messages, tools=conversation.tools, tool_choice="none", mode=mode,
                              max_new_tokens=64).text
            stated = _names(word, text)
            counts[view]["questions"] += 1
            counts[view]["stated"] += stated
            replies.append({"word": word, "view": view, "stated": stated, "reply": text})
    return {"counts": counts, "rates": {view: c["stated"] / max(c["questions"], 1) for view, c in counts.items()},
            "replies": replies}


def _names(word: str, text: str) -> bool:
    """Whether `text` holds `word` as a word ("continues" does not name "continue"; "__enter__()" names
    "__enter__")."""
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None


def _value_in(result: str, text: str) -> bool:
    """Whether a reply states a tool result: the text itself, or every value of a JSON object result."""
    try:
        value = json.loads(result)
    except ValueError:
        return result.strip() in text
    values = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
    return all(str(v) in text for v in values)


def render_markdown(report: dict) -> str:
    raw, tuned = report["dev"]["raw"]["rates"], report["dev"]["tuned"]["rates"]
    counts = report["dev"]["tuned"]["counts"]
    rows = [("decision (call iff a tool fits)", "decision", counts["conversations"]),
            ("right tool, when one fits", "tool", counts["should_call"]),
            ("exact arguments, when one fits", "arguments", counts["should_call"]),
            ("no call, when none fits", "no_call", counts["no_call_wanted"]),
            ("answer states the result", "answer_states_value", counts["answers"]),
            ("answer clean (no markup, ends)", "answer_clean", counts["answers"])]
    spec = report["spec"]
    lines = [f"# train-agent report ({report['date']})", "",
             f"LoRA rank {spec['rank']} (α {spec['alpha']}) on all {len(spec['top'])} layers of "
             f"{spec['extra']['verifier']}; {report['train_conversations']} conversations "
             f"({', '.join(f'{k} {v}' for k, v in sorted(report['kinds'].items()))}), "
             f"{report['target_tokens']} target tokens of {report['train_tokens']}; "
             f"{report['settings']['epochs']} epoch(s), lr {report['settings']['lr']}; "
             + (f"{report['train_seconds'] / 60:.0f} min of training." if report.get("train_seconds") is not None
                else "training time not recorded."), "",
             f"Held out (never trained on): the tools {', '.join(report['dev_tools'])} and the last general "
             "questions; first replies under tool_choice=\"auto\", greedy, the model alone on the full view.", "",
             "| held-out measure | n | raw | tuned |", "|---|---|---|---|"]
    lines += [f"| {label} | {n} | {raw[key]:.2f} | {tuned[key]:.2f} |" for label, key, n in rows]
    raw_kinds = report["dev"]["raw"].get("no_call_by_kind", {})
    for kind, tuned_kind in report["dev"]["tuned"].get("no_call_by_kind", {}).items():
        if kind in raw_kinds:
            lines.append(f"| no call, {kind} | {tuned_kind['n']} | {raw_kinds[kind]['rate']:.2f} | "
                         f"{tuned_kind['rate']:.2f} |")
    names = {"full": "whole", "comp": "compressed"}
    reads = report.get("dev_reads")
    if reads:
        raw, tuned, counts = reads["raw"]["rates"], reads["tuned"]["rates"], reads["tuned"]["counts"]
        lines += ["", "Held-out readings (docstring haystacks, search outputs), the model alone on the view named:", "",
                  "| reading measure | n | raw | tuned |", "|---|---|---|---|"]
        for view in ("full", "comp"):
            lines += [f"| states the planted value, {names[view]} | {counts[view]['planted']} | "
                      f"{raw[view]['found']:.2f} | {tuned[view]['found']:.2f} |",
                      f"| copies no document markup, {names[view]} | {counts[view]['replies']} | "
                      f"{raw[view]['clean']:.2f} | {tuned[view]['clean']:.2f} |"]
    found = report.get("lookups")
    if found:
        raw, tuned, counts = found["raw"]["rates"], found["tuned"]["rates"], found["tuned"]["counts"]
        lines += ["", "Held-out lookups (a search of Python's language reference, its whole section as the result, "
                  "then the answer with no call allowed):", "",
                  "| lookup measure | n | raw | tuned |", "|---|---|---|---|"]
        lines += [f"| the answer names the section's answer, {names[view]} view | {counts[view]['questions']} | "
                  f"{raw[view]:.2f} | {tuned[view]:.2f} |" for view in ("full", "comp")]
    return "\n".join(lines) + "\n"


def plot_losses(history: dict, path: Path) -> None:
    from ...plotting import pyplot

    plt = pyplot(optional=True)
    if plt is None:
        return
    steps = history["steps"]
    window = max(1, len(steps) // 20)
    values = [s["loss"] for s in steps]
    smooth = [statistics.fmean(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([s["epoch"] for s in steps], values, color="C0", lw=0.5, alpha=0.3)
    ax.plot([s["epoch"] for s in steps], smooth, color="C0", lw=1.5, label=f"mean of {window} steps")
    ax.set_xlabel("epoch")
    ax.set_ylabel("cross-entropy on assistant tokens (nats/token)")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("train-agent loss")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
