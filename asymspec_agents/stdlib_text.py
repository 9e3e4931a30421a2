"""Real text no one here wrote, from Python's own docstrings: the benchmarks' tasks and the training data are both
built from it (each from other modules: `TOOL_MODULES` are the tools task's, and training never reads them).
"""

from __future__ import annotations

import importlib
import inspect
import random
import re
from dataclasses import dataclass

from .context import ToolSpec
from .context.tools import tool_spec_from_callable

# the standard-library modules whose functions the tools task offers as tools
TOOL_MODULES = ["os.path", "shutil", "textwrap", "json", "base64", "statistics", "string", "fnmatch", "glob", "heapq",
                "bisect", "difflib", "html", "shlex", "zlib", "random", "calendar", "copy", "secrets", "urllib.parse"]


@dataclass
class ToolChoice:
    """A question that paraphrases one tool's docstring, among other tools."""

    question: str
    tools: list[ToolSpec]
    answer: str  # the tool's name


def tool_choices(count: int, seed: int = 0, tools_per_item: int = 6,
                 modules: tuple[str, ...] = tuple(TOOL_MODULES)) -> list[ToolChoice]:
    """`count` choices, deterministic in `seed`: each asks for the tool a later sentence of its docstring describes
    (the first sentence is what a compressed tool list keeps)."""
    rng = random.Random(f"tools-{seed}")
    candidates = documented_functions(modules)
    choices = []
    for _ in range(count):
        chosen = rng.sample(candidates, tools_per_item)
        target_name, _, hint = chosen[0]
        rng.shuffle(chosen)
        choices.append(ToolChoice(f"Which tool does this: {hint} Call that tool.", [spec for _, spec, _ in chosen],
                                  target_name))
    return choices


def documented_functions(modules=tuple(TOOL_MODULES)) -> list[tuple[str, ToolSpec, str]]:
    """(tool name, full spec, a later docstring sentence) for the public functions of `modules` with rich docstrings
    (the tools task's; distillation's tool prompts use other modules)."""
    found = []
    for module_name in modules:
        module = importlib.import_module(module_name)
        for attr in sorted(dir(module)):
            function = getattr(module, attr)
            if attr.startswith("_") or not inspect.isfunction(function) or function.__module__ != module.__name__:
                continue
            said = sentences(inspect.getdoc(function) or "")
            if len(said) < 2 or not 30 <= len(said[1]) <= 200:
                continue
            name = f"{module_name.replace('.', '_')}_{attr}"
            try:
                spec = tool_spec_from_callable(function, name=name)
            except Exception:
                continue
            found.append((name, spec, said[1]))
    return found


def sentences(text: str) -> list[str]:
    """The sentences of `text`, whitespace joined."""
    text = " ".join(text.split())
    return [s for s in re.split(r"(?<=[.!?])\s+", text) if s]


def haystack(rng: random.Random, docs: list[str], chars: int, facts: list[str]) -> str:
    """Paragraphs drawn from `docs` until `chars`, each fact put in between two of them at a random depth."""
    parts, total = [], 0
    while total < chars:
        parts.append(rng.choice(docs))
        total += len(parts[-1])
    for fact in facts:  # each fact at its own random depth, between paragraphs
        parts.insert(rng.randint(0, len(parts)), fact)
    return "\n\n".join(parts)
