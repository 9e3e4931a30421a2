"""Held-out lookups for `train-agent`'s report: a question, one search of Python's language reference (the
`pydoc_data.topics` sections every CPython ships), its whole section as the tool's result, then the answer.

They measure what the first-reply measures and the planted-value readings did not see: whether the tuned model
still answers from a long, real search result (a twin-reply recipe once stated none of six answers its searches
found; docs/agents.md). Written for this report; never trained on, and not the examples'
question (theirs is about assert).
"""

from __future__ import annotations

from ...context import UserMessage
from .transcripts import Conversation, _call, _result

# (question, the reference topic that answers it, the word a right answer names: in the section's first 4000 chars)
LOOKUPS = (
    ("Which statement is a null operation?", "pass", "pass"),
    ("Which statement skips to the next cycle of the nearest enclosing loop?", "continue", "continue"),
    ("Which statement terminates the nearest enclosing loop?", "break", "break"),
    ("Which keyword creates an anonymous function?", "lambda", "lambda"),
    ("Which exception is raised when an attribute reference fails?", "attribute-references", "AttributeError"),
    ("Which exception does looking up a missing dictionary key raise?", "typesmapping", "KeyError"),
    ("Which exception is raised when a name is not found?", "naming", "NameError"),
    ("Which exception does a division by zero raise?", "binary", "ZeroDivisionError"),
    ("Which exception does an unsupported order comparison raise?", "comparisons", "TypeError"),
    ("Which method of a context manager does the with statement load first?", "with", "__enter__"),
    ("Which method makes the in operator work for a user-defined class?", "in", "__contains__"),
    ("Which method lets an object support subscription?", "subscriptions", "__getitem__"),
    ("What is the name of Python's null object?", "bltin-null-object", "None"),
)
SEARCH = {"name": "search_language_reference",
          "description": "Search Python's language reference; returns the best-matching section in full.",
          "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "Keywords"}},
                         "required": ["query"]}}
CALCULATOR = {"name": "calculator", "description": "Evaluate an arithmetic expression.",
              "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                             "required": ["expression"]}}
MAX_CHARS = 4000  # a search tool's cap on what it returns


def lookups() -> list[Conversation]:
    """Each lookup up to the tool's result (the answer is the model's to write); `expected["value"]` holds the
    word a right answer names."""
    from pydoc_data.topics import topics

    out = []
    for question, topic, word in LOOKUPS:
        text = f"[{topic}]\n{topics[topic]}"[:MAX_CHARS]
        messages = [UserMessage(question), _call(SEARCH["name"], {"query": topic.replace("-", " ")}),
                    _result(SEARCH["name"], text)]
        out.append(Conversation("lookup", messages, [SEARCH, CALCULATOR], "full", {"calls": [], "value": word}))
    return out

