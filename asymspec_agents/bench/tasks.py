"""Benchmark tasks built reproducibly from real text no one here wrote (Python's own docs and docstrings).

Every builder is deterministic in its seed; items carry a split ("dev" for choosing settings, "test" for the
numbers reported) and a scorer. The tasks:
- needle: a planted fact (one hop: a vault's code; two hops: the vault names a key, the key names the code) at a
  random depth of a retrieved passage assembled from `pydoc_data.topics` (needle_long: a ~4k-token passage);
- tools: choose the standard-library function whose docstring a question paraphrases; the full view has the
  docstrings, the compressed view only signatures with their first sentence (the question uses a later one);
- retention: a fact given in passing in an early user turn, turns of real-text filler, then a question on it;
- tool_output: an agent transcript whose answer lies in a long tool output (the needle's haystack, returned by a
  call the assistant already made), then the question again.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from ..context import AssistantMessage, Passage, SystemMessage, ToolCall, ToolResult, ToolSpec, UserMessage
from ..stdlib_text import haystack, sentences, tool_choices

COLORS = ["amber", "cobalt", "crimson", "ivory", "jade", "ochre", "scarlet", "teal", "violet", "silver", "onyx", "coral"]
ANIMALS = ["heron", "lynx", "otter", "falcon", "badger", "marten", "ibis", "gecko", "puffin", "weasel", "osprey", "tapir"]
DEV_FRACTION = 0.3


@dataclass
class Item:
    task: str
    id: str
    messages: list
    answer: str
    split: str
    tools: list[ToolSpec] = field(default_factory=list)
    query: str | None = None

    def correct(self, reply) -> bool:
        if self.task == "tools":  # the tool name decides; a call cut off after it still names it
            calls = reply.tool_calls or reply.invalid_tool_calls
            return bool(calls) and calls[0].name == self.answer
        return self.answer in reply.text


LONG_HAYSTACK_CHARS = 17_000  # about 4.2k SmolLM2 tokens: where a cheaper drafter must pay off in wall time


def build(task: str, count: int, seed: int = 0) -> list[Item]:
    return BUILDERS[task](count, seed)


def needle(count: int, seed: int = 0, hops: int = 1, haystack_chars: int = 6000, task: str | None = None) -> list[Item]:
    task = task or f"needle{hops if hops > 1 else ''}"
    rng = random.Random(f"{task}{hops}-{seed}" if task == "needle_long" else f"needle{hops}-{seed}")
    docs = _pydoc_paragraphs()
    items = []
    for i in range(count):
        color, animal, code = rng.choice(COLORS), rng.choice(ANIMALS), str(rng.randint(1000, 9999))
        if hops == 1:
            facts = [_vault_fact(color, code)]
        else:
            facts = [f"The {color} vault keeps its code under the name {animal}.", f"The code named {animal} is {code}."]
        document = haystack(rng, docs, haystack_chars, facts)
        question = _vault_question(color)
        messages = [SystemMessage("Answer the question from the documents."),
                    UserMessage(question, passages=[Passage(document, source="python-docs")])]
        items.append(Item(task, f"{task}-{seed}-{i}" if task == "needle_long" else f"needle{hops}-{seed}-{i}",
                          messages, code, _split(i, count), query=question))
    return items


def tool_output(count: int, seed: int = 0, haystack_chars: int = 6000) -> list[Item]:
    """The needle as an agent meets it: the document comes back from a tool call, not as a retrieved passage."""
    rng = random.Random(f"tool_output-{seed}")
    docs = _pydoc_paragraphs()
    items = []
    for i in range(count):
        color, code = rng.choice(COLORS), str(rng.randint(1000, 9999))
        document = haystack(rng, docs, haystack_chars, [_vault_fact(color, code)])
        question = _vault_question(color)
        call = ToolCall(f"call_{i}", "read_vault_notes", {})
        messages = [SystemMessage("Answer the question from the tool results."),
                    UserMessage(f"Read the vault notes. {question}"), AssistantMessage(tool_calls=[call]),
                    ToolResult(call.id, call.name, document), UserMessage(f"Now answer: {question}")]
        items.append(Item("tool_output", f"tool_output-{seed}-{i}", messages, code, _split(i, count), query=question))
    return items


def _vault_fact(color: str, code: str) -> str:
    return f"The access code of the {color} vault is {code}."


def _vault_question(color: str) -> str:
    return f"What is the access code of the {color} vault? Answer with the four-digit code."


def tool_selection(count: int, seed: int = 0, tools_per_item: int = 6) -> list[Item]:
    items = []
    for i, choice in enumerate(tool_choices(count, seed, tools_per_item)):
        messages = [SystemMessage("Pick the one tool that does what the user asks and call it."),
                    UserMessage(choice.question)]
        items.append(Item("tools", f"tools-{seed}-{i}", messages, choice.answer, _split(i, count),
                          tools=choice.tools, query=choice.question))
    return items


def retention(count: int, seed: int = 0, filler_turns: int = 3) -> list[Item]:
    rng = random.Random(f"retention-{seed}")
    docs = _pydoc_paragraphs()
    items = []
    for i in range(count):
        code = str(rng.randint(1000, 9999))
        before, after = rng.sample(docs, 2)
        messages = [SystemMessage("You are a helpful assistant."),
                    UserMessage(f"{before}\n\nBy the way, my project number is {code}. Keep it in mind.\n\n{after}\n\n"
                                "What is this text about?"),
                    AssistantMessage(_first_sentence(before))]
        for _ in range(filler_turns):
            doc = rng.choice(docs)
            messages += [UserMessage(f"Summarize this in one sentence:\n{doc}"), AssistantMessage(_first_sentence(doc))]
        messages.append(UserMessage("What is my project number? Answer with the four-digit number."))
        items.append(Item("retention", f"retention-{seed}-{i}", messages, code, _split(i, count)))
    return items


# -- real text -----------------------------------------------------------------------------------------------

def _pydoc_paragraphs(min_chars: int = 300, max_chars: int = 1200) -> list[str]:
    from pydoc_data.topics import topics

    paragraphs = []
    for name in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[name]):
            block = " ".join(block.split())
            if min_chars <= len(block) <= max_chars and not block.startswith(("*", ">>>", "[")):
                paragraphs.append(block)
    return paragraphs


def _first_sentence(text: str) -> str:
    return sentences(text)[0] if text else ""


def _split(index: int, count: int) -> str:
    return "dev" if index < round(count * DEV_FRACTION) else "test"


# task name -> items(count, seed): the one list of benchmark tasks
BUILDERS = {"needle": needle, "needle2": lambda n, s: needle(n, s, hops=2), "tools": tool_selection,
            "retention": retention, "tool_output": tool_output,
            "needle_long": lambda n, s: needle(n, s, haystack_chars=LONG_HAYSTACK_CHARS, task="needle_long")}
TASKS = tuple(BUILDERS)
