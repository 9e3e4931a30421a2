"""Agent-like transcripts with their decision points, in the product's own token format.

A transcript is one rendered conversation (the view the drafter and verifier of a fixed-block stack both read):
the tools block, a user request built from real stdlib docstrings (`stdlib_text.tool_choices`, as the tools task's), the
assistant's tool call, the tool's result and a final answer. Only tokens the assistant writes are positions a
drafter drafts; among them, decision points are tagged with the engine's own `DecisionPolicy` rule (a trigger
regex on the decoded tokens before the position), so training and serving agree on what a decision point is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..context import AssistantMessage, DualContext, SystemMessage, ToolCall, ToolResult, UserMessage
from ..engine.decisions import DecisionPolicy
from ..errors import InvalidInputError
from ..stdlib_text import tool_choices


@dataclass
class Transcript:
    ids: list[int]  # the whole rendered conversation
    spans: list[tuple[int, int]]  # [start, end) of each assistant turn in `ids`: the positions a drafter drafts
    tool_names: list[str] = field(default_factory=list)  # the tools offered: plausible (wrong) choices
    answer: str = ""  # the tool the user asked for

    def assistant_positions(self) -> list[int]:
        return [j for start, end in self.spans for j in range(max(start, 1), end)]


def agent_transcripts(tokenizer, count: int, seed: int = 0, *, tools_per_item: int = 3, view: str = "comp",
                      exclude_answers: set[str] | frozenset = frozenset()) -> list[Transcript]:
    """`count` transcripts from `tool_selection` items of `seed`, rendered in `view` ("comp" or "full").

    `exclude_answers`: skip items whose target tool is in it (held-out sets that share no answer with training).
    """
    if view not in ("comp", "full"):
        raise InvalidInputError(f"view must be 'comp' or 'full', got {view!r}.")
    context = DualContext(tokenizer)
    transcripts: list[Transcript] = []
    pool = count + len(exclude_answers) + 8
    while len(transcripts) < count:
        transcripts.clear()
        for item in tool_choices(pool, seed, tools_per_item=tools_per_item):
            if item.answer in exclude_answers:
                continue
            transcripts.append(_render(context, _conversation(item), item, view))
            if len(transcripts) == count:
                break
        pool *= 2
    return transcripts


def decision_positions(transcript: Transcript, tokenizer, policy: DecisionPolicy | None = None) -> list[int]:
    """Assistant positions j whose token `ids[j]` the policy tags (the engine's rule: triggers on the decoded
    `lookback_tokens` before j). Entropy triggers are not used: they depend on the model, not the transcript."""
    policy = policy or DecisionPolicy()
    ids, lookback = transcript.ids, policy.lookback_tokens
    return [j for j in transcript.assistant_positions() if policy.text_triggers(tokenizer.decode(ids[max(0, j - lookback):j]))]


def _conversation(item) -> list:
    call = ToolCall("call_0", item.answer, {})
    return [SystemMessage("Pick the one tool that does what the user asks and call it."), UserMessage(item.question),
            AssistantMessage("", [call]), ToolResult("call_0", item.answer, "Done."),
            AssistantMessage(f"Final Answer: {item.answer}")]


def _render(context: DualContext, messages: list, item, view: str) -> Transcript:
    attr = "comp_ids" if view == "comp" else "full_ids"
    ids = getattr(context.render(messages, tools=item.tools, add_generation_prompt=False), attr)
    spans = []
    for index, message in enumerate(messages):
        if not isinstance(message, AssistantMessage):
            continue
        before = getattr(context.render(messages[:index], tools=item.tools, add_generation_prompt=True), attr)
        upto = getattr(context.render(messages[:index + 1], tools=item.tools, add_generation_prompt=False), attr)
        if ids[:len(before)] != before or ids[:len(upto)] != upto:
            raise InvalidInputError("This tokenizer's chat template is not append-stable; transcripts need one that is.")
        spans.append((len(before), len(upto)))
    return Transcript(ids, spans, [spec.name for spec in item.tools], item.answer)
