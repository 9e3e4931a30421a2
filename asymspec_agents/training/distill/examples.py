"""Chat-formatted training prompts from text that ships with Python: the standard library's docstrings.

Each is a conversation the verifier answers itself (its greedy reply is the training target). `build_examples`:
- `passage`: a question over retrieved documents with facts planted at random depths (plus distractor facts);
- `turns`: a fact said in passing early in a conversation, turns of filler, then a question about it;
- `plain`: a question over documents with no planted fact (what the documents are about).
`build_tool_examples` (agent transcripts; the reply is decoded under the tool grammar the product uses):
- `tool_call`: six stdlib functions (by default) as tools (full schemas; the compressed view shows signatures)
  and a request that paraphrases one docstring: the reply is the call;
- `tool_result`: a search call already made and its long output with a planted fact: the reply answers from it
  (the compressed view holds a compressed tool output).

The benchmarks build their haystacks from `pydoc_data.topics` with other fact wordings and names, and their tools
from other modules; these use the standard library's docstrings, so no benchmark item, passage or tool is trained on.
"""

from __future__ import annotations

import ast
import random
import re
import sysconfig
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ...context import (AssistantMessage, CompressionPolicy, Passage, SystemMessage, ToolCall, ToolResult, ToolSpec,
                        UserMessage)
from ...stdlib_text import TOOL_MODULES, documented_functions, haystack

NAMES = ["Mira", "Tomas", "Anouk", "Kenji", "Ravi", "Lena", "Omar", "Greta", "Paulo", "Ines", "Yusuf", "Hana"]
PLACES = ["north", "south", "east", "west", "upper", "lower", "old", "new", "main", "back"]
OBJECTS = ["gate", "office", "archive", "workshop", "garage", "library", "cellar", "studio", "tower", "depot"]
THINGS = ["locker", "order", "membership", "room", "invoice", "ticket", "badge", "account"]
KINDS = {"passage": 0.55, "turns": 0.30, "plain": 0.15}
TOOL_KINDS = {"tool_call": 0.4, "tool_result": 0.6}
# modules whose functions become tools here; none is one of the tools task's (stdlib_text.TOOL_MODULES)
TRAINING_TOOL_MODULES = ("ast", "bz2", "codecs", "dataclasses", "email.utils", "fileinput", "gzip", "inspect",
                         "ipaddress", "linecache", "locale", "logging", "mimetypes", "ntpath", "platform", "quopri",
                         "site", "subprocess", "sysconfig", "tarfile", "tempfile", "threading", "tokenize",
                         "traceback", "typing", "uuid")


@dataclass
class Example:
    kind: str
    messages: list
    answer: str | None  # the planted value, if any
    policy: CompressionPolicy  # how this example's compressed view is made
    query: str | None = None  # for query-aware compressors
    tools: list = field(default_factory=list)  # ToolSpecs offered to the model
    tool_choice: str | None = None  # as in a request: "required" (the reply is a call) or "none"
    teacher_messages: list | None = None  # what the teacher reads instead (an excerpt: documents.py); None: the same


@lru_cache(maxsize=1)
def _benchmark_runs(words: int = 12) -> frozenset[str]:
    """Every run of `words` words of `pydoc_data.topics`, the haystack text of the project's own benchmarks."""
    from pydoc_data.topics import topics

    return frozenset(run for text in topics.values() for run in word_runs(text, words))


def word_runs(text: str, words: int = 12) -> set[str]:
    found = re.findall(r"\w+", text.lower())
    return {" ".join(found[i:i + words]) for i in range(max(0, len(found) - words + 1))}


@lru_cache(maxsize=1)
def benchmark_sources() -> frozenset[Path]:
    """The standard library's files whose docstrings a benchmark reads as tool descriptions (the tools task's
    modules): no training text comes from them."""
    import importlib

    files = (getattr(importlib.import_module(name), "__file__", None) or "" for name in TOOL_MODULES)
    return frozenset(Path(file).resolve() for file in files if file.endswith(".py"))


def benchmark_free(texts) -> list[str]:
    """`texts` less those sharing a run of 12 words with a benchmark's haystack (some docstrings repeat the
    reference documentation that `pydoc_data.topics` holds)."""
    banned = _benchmark_runs()
    return [text for text in texts if not word_runs(text) & banned]


def stdlib_modules():
    """(path, source, syntax tree) of the standard library's top-level modules, those a benchmark reads left out
    (`benchmark_sources`)."""
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        if path.resolve() in benchmark_sources():
            continue
        text = path.read_text(errors="ignore")
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            continue
        yield path, text, tree


@lru_cache(maxsize=1)
def stdlib_paragraphs(min_chars: int = 200, max_chars: int = 1200) -> tuple[str, ...]:
    """Docstring paragraphs of the standard library's top-level modules (about a thousand on CPython 3.11), none
    of them benchmark text (`benchmark_free`)."""
    found = set()
    for _, _, tree in stdlib_modules():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                for block in re.split(r"\n\s*\n", ast.get_docstring(node) or ""):
                    block = " ".join(block.split())
                    if min_chars <= len(block) <= max_chars and not block.startswith((">>>", "*")):
                        found.add(block)
    return tuple(benchmark_free(sorted(found)))


def build_examples(count: int, seed: int, tokenizer, *, ratios=(2, 4, 4, 8), compressors=("head_tail", "head_tail", "bm25"),
                   haystack_chars=(1500, 7000)) -> list[Example]:
    """`count` examples, deterministic in `seed`; each compressed by a random ratio and compressor."""
    rng = random.Random(f"distill-{seed}")
    paragraphs = stdlib_paragraphs()
    kinds, weights = zip(*KINDS.items())
    out = []
    for _ in range(count):
        kind = rng.choices(kinds, weights)[0]
        if kind == "passage":
            sentence, question, value = _fact(rng)
            others = [_fact(rng)[0] for _ in range(rng.randint(0, 2))]
            text = haystack(rng, paragraphs, rng.randint(*haystack_chars), [sentence, *others])
            messages = [SystemMessage(rng.choice(["Answer the question from the documents.", "Use the documents to answer."])),
                        UserMessage(question, passages=[Passage(text, source="stdlib")])]
            budget_kind = "passage"
        elif kind == "turns":
            value, thing = _value(rng), rng.choice(THINGS)
            first, second = rng.sample(paragraphs, 2)
            messages = [SystemMessage("You are a helpful assistant."),
                        UserMessage(f"{first}\n\nBy the way, my {thing} number is {value}. Remember it.\n\n{second}\n\n"
                                    "What is this text about?"),
                        AssistantMessage(_first_sentence(first))]
            for _ in range(rng.randint(1, 4)):
                filler = rng.choice(paragraphs)
                messages += [UserMessage(f"Give me the gist of this:\n{filler}"), AssistantMessage(_first_sentence(filler))]
            question = f"What is my {thing} number? Answer with the number."
            messages.append(UserMessage(question))
            text, budget_kind = messages[1].content, "user"
        else:
            value = None
            text = haystack(rng, paragraphs, rng.randint(800, 4000), [])
            question = rng.choice(["Summarize the documents in two sentences.", "What is the main topic of the documents?",
                                   "List two things the documents explain."])
            messages = [SystemMessage("Answer the question from the documents."),
                        UserMessage(question, passages=[Passage(text, source="stdlib")])]
            budget_kind = "passage"
        policy, query = _compression(rng, tokenizer, text, budget_kind, ratios, compressors, question)
        out.append(Example(kind, messages, value, policy, query))
    return out


def build_tool_examples(count: int, seed: int, tokenizer, *, ratios=(2, 4, 4, 8),
                        compressors=("head_tail", "bm25"), haystack_chars=(1500, 7000), tools_per_example: int = 6
                        ) -> list[Example]:
    """`count` agent-transcript examples (`tool_call` and `tool_result`), deterministic in `seed`."""
    rng = random.Random(f"distill-tools-{seed}")
    paragraphs, functions = stdlib_paragraphs(), documented_functions(TRAINING_TOOL_MODULES)
    kinds, weights = zip(*TOOL_KINDS.items())
    out = []
    for _ in range(count):
        if rng.choices(kinds, weights)[0] == "tool_call":
            chosen = rng.sample(functions, tools_per_example)
            target, _, hint = chosen[0]
            rng.shuffle(chosen)
            request = rng.choice(["Call the tool that does this: {}", "{} Use the right tool for that.",
                                  "I need a function for this job: {} Call it."]).format(hint)
            system = rng.choice(["Call the one tool that fits the request.",
                                 "You are an agent. Answer by calling a tool."])
            messages = [SystemMessage(system), UserMessage(request)]
            out.append(Example("tool_call", messages, target, CompressionPolicy(), request,
                               tools=[spec for _, spec, _ in chosen], tool_choice="required"))
            continue
        sentence, question, value = _fact(rng)
        others = [_fact(rng)[0] for _ in range(rng.randint(0, 2))]
        text = haystack(rng, paragraphs, rng.randint(*haystack_chars), [sentence, *others])
        words = [w.strip("?.,'") for w in question.split()[2:8] if len(w) > 3]
        call = ToolCall("call_0", "search_notes", {"query": " ".join(words[:4])})
        messages = [SystemMessage("You are a helpful assistant. Use the tools to look things up before answering."),
                    UserMessage(question), AssistantMessage(tool_calls=[call]),
                    ToolResult("call_0", "search_notes", text)]
        if rng.random() < 0.5:  # an agent loop's nudge to answer now (as examples/langgraph_agent.py sends)
            messages.append(UserMessage("Now answer my question from the search results."))
        policy, query = _compression(rng, tokenizer, text, "tool_result", ratios, compressors, question)
        out.append(Example("tool_result", messages, value, policy, query, tools=[SEARCH_TOOL], tool_choice="none"))
    return out


SEARCH_TOOL = ToolSpec("search_notes", "Search the team's notes and documents; returns the best matching sections "
                       "in full.",
                       {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]})


def _compression(rng: random.Random, tokenizer, text: str, kind: str, ratios, compressors, question: str):
    """A random compressor and ratio for the `kind` text of one example: its policy, and the query a query-aware
    compressor (BM25) reads."""
    tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    compressor = rng.choice(compressors)
    policy = CompressionPolicy(budgets={kind: max(16, tokens // rng.choice(ratios))}, compressors={kind: compressor})
    return policy, question if compressor == "bm25" else None


def _value(rng: random.Random) -> str:
    digits = rng.choice([3, 4, 4, 5, 6])
    return str(rng.randint(10 ** (digits - 1), 10 ** digits - 1))


def _fact(rng: random.Random) -> tuple[str, str, str]:
    value, form = _value(rng), rng.random()
    if form < 0.4:
        entity, attribute = f"the {rng.choice(PLACES)} {rng.choice(OBJECTS)}", rng.choice(
            ["door code", "key number", "room number", "extension", "pin"])
        return (f"The {attribute} of {entity} is {value}.", f"What is the {attribute} of {entity}? Answer with the number.",
                value)
    name = rng.choice(NAMES)
    if form < 0.7:
        thing = rng.choice(THINGS)
        return f"{name}'s {thing} number is {value}.", f"What is {name}'s {thing} number? Answer with the number.", value
    return (f"The phone extension of {name} is {value}.", f"What is the phone extension of {name}? Answer with the number.",
            value)


def _first_sentence(text: str) -> str:
    return text.split(". ")[0].rstrip(".") + "."
