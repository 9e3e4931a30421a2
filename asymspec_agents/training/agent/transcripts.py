"""Agent conversations built from the invented tools of `catalogue`, rendered in the product's own format.

Kinds (each a whole conversation; every assistant turn in it is a training target):
- `call`: a question one offered tool answers -> the call (values copied from the question, optional arguments only
  when the question states them) -> its result -> an answer that states the result in words and stops;
- `parallel`: one question about two values -> two calls of the same tool -> both results -> one answer;
- `chain`: the second call needs the first one's result (a capital, then its weather) -> the answer;
- `error`: the tool fails -> the answer says what failed, without inventing a value;
- `offtopic`: the question needs a tool that is not offered (only tools of other domains are) -> a plain reply that
  no available tool can do it, and no call;
- `nearmiss`: the same, but the tools offered are near the question's topic (its own domain or a neighbouring one:
  a circle's area asked, a rectangle's perimeter and a hypotenuse offered) -> the same reply, and no call;
- `twin`: one offered tool, asked about its own argument values for something it does not do (`catalogue.TWINS`:
  a circle's circumference with the circle's area tool, a sphere's volume from its radius) -> a reply that names
  what it does and what is asked, and no call;
- `unstated`: a question for an offered tool's task that does not state the values its required arguments need
  ("Can you check the weather?") -> a reply asking for them, and no call (a call would invent them);
- `general`: a question no tool is for -> the raw model's own answer (`answers` supplies it), and no call;
- `readings` (its own builder): a question over documents or over a search tool's long output (the distillation
  recipe's docstring haystacks: `passage`, `plain`, `tool_result`) -> the raw model's own reply in the same view, so
  tuning leaves its reading of documents, whole or compressed, as it was.
Tools come 1–5 per conversation in random order, some names namespaced ("weather.get_current_weather") or camelCase,
some schemas without descriptions; half the conversations are rendered as the verifier's compressed view (tool
signatures), half as the full view (JSON schemas), so the adapter works in both.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from random import Random

from ...context import AssistantMessage, CompressionPolicy, DualContext, ToolCall, ToolResult, UserMessage
from ...errors import InvalidInputError
from .catalogue import COUNTRIES, GENERAL_QUESTIONS, TOOLS, TWINS, Tool

# nearmiss, twin and unstated take their shares from offtopic's (`conversations`); next to it, so the other kinds'
# draws stay
KINDS = {"call": 0.40, "parallel": 0.06, "chain": 0.06, "error": 0.06, "offtopic": 0.22, "nearmiss": 0.0, "twin": 0.0,
         "unstated": 0.0, "general": 0.20}
# domains near one another: a tool of one is a plausible, wrong, pick for a question of another
NEIGHBOURS = ({"math", "physics", "finance", "health", "units"}, {"weather", "geography", "time", "travel", "calendar"},
              {"shopping", "food", "media", "sports"}, {"text", "messages", "home"})
GENERIC = {"calculate"}  # tools that could answer many questions of their domain: never offered as a near miss
CHAINS = (("country_capital", "get_current_weather", "city"), ("country_capital", "city_population", "city"),
          ("country_capital", "local_time", "city"))
ERRORS = ("service unavailable (HTTP 503)", "timeout after 30 s", "rate limit exceeded", "not found")


@dataclass
class Conversation:
    kind: str
    messages: list
    tools: list[dict]  # the tool schemas offered
    view: str  # "full" or "comp": which view is trained on
    expected: dict = field(default_factory=dict)  # what a right first reply holds: {"calls": [...]} or {"calls": []}
    policy: CompressionPolicy | None = None  # how the compressed view is made (None: the product's default)
    query: str | None = None  # what a query-aware compressor selects for


@dataclass
class Rendered:
    kind: str
    ids: list[int]
    spans: list[tuple[int, int]]  # [start, end) of each assistant turn (its closing <|im_end|> included)


def split_tools(dev_every: int = 6) -> tuple[list[Tool], list[Tool]]:
    """(training tools, held-out tools): every `dev_every`-th tool is held out for the report, never trained on.
    The chains' tools stay in training."""
    chained = {name for chain in CHAINS for name in chain[:2]}
    dev = [t for i, t in enumerate(TOOLS) if i % dev_every == dev_every - 1 and t.name not in chained]
    return [t for t in TOOLS if t not in dev], dev


def split_questions(dev: int = 6) -> tuple[tuple[str, ...], tuple[str, ...]]:
    return GENERAL_QUESTIONS[:-dev], GENERAL_QUESTIONS[-dev:]


def conversations(count: int, seed: int, tools: list[Tool], questions,
                  answer: Callable[[str], str | None], near_misses: float = 0.0,
                  twins: float = 0.0, unstated: float = 0.0, near_company: float = 0.0) -> list[Conversation]:
    """`count` conversations of the kinds in `KINDS` (their shares), from `tools` and general `questions`, whose
    replies `answer(question)` gives (the raw model's own; None: that question is not used). `near_misses`, `twins`
    and `unstated` of them are nearmiss, twin and unstated conversations, taken from offtopic's share (0: the same
    conversations as before those kinds existed). `near_company` of the call conversations offer the fitting tool
    beside tools near its topic (nearmiss's kind of tools: the same ones, this time with the fitting tool among
    them) instead of tools of any domain (0: no draw is spent on it)."""
    if not 0.0 <= near_company <= 1.0:
        raise InvalidInputError(f"near_company is a share of the call conversations, from 0 to 1, not {near_company}.")
    taken = {"near_misses": near_misses, "twins": twins, "unstated": unstated}
    for name, share in taken.items():
        if share < 0:
            raise InvalidInputError(f"{name} must not be negative, not {share}.")
    if sum(taken.values()) > KINDS["offtopic"]:
        raise InvalidInputError(f"near_misses + twins + unstated must not exceed {KINDS['offtopic']} (offtopic's "
                                f"share), not {near_misses} + {twins} + {unstated}.")
    rng = Random(seed)
    shares = {**KINDS, "offtopic": KINDS["offtopic"] - sum(taken.values()), "nearmiss": near_misses, "twin": twins,
              "unstated": unstated}
    kinds, weights = zip(*shares.items())
    by_name = {t.name: t for t in tools}
    chains = [c for c in CHAINS if c[0] in by_name and c[1] in by_name]
    twinned = any(t.name in TWINS for t in tools)
    answered = None  # the questions with a reply, asked for once a general conversation is first drawn
    out = []
    while len(out) < count:
        kind = rng.choices(kinds, weights)[0]
        if kind == "chain" and not chains or kind == "twin" and not twinned or \
                kind == "unstated" and not any(map(_needs_values, tools)):
            continue
        if kind == "general":
            answered = answered if answered is not None else [q for q in questions if answer(q)]
            if answered:
                out.append(_general(rng, tools, answered, answer))
            continue
        out.append(_build(kind, rng, tools, chains, near_company))
    return out


def held_out_conversations(count: int, seed: int, answer: Callable[[str], str | None],
                           **shares: float) -> list[Conversation]:
    """The held-out conversations `train-agent`'s report draws for a recipe's `seed` and `shares` (of
    `conversations`): its held-out tools and questions, from their own seed, so that other verifiers can be measured
    on the very same ones."""
    _, tools = split_tools()
    _, questions = split_questions()
    return conversations(count, seed + 10_000, tools, questions, answer, **shares)


def readings(count: int, seed: int, tokenizer, tools: list[Tool],
             answer: Callable[[Conversation], str | None] | None = None) -> list[Conversation]:
    """`count` conversations that answer from documents (two in three) or from a search tool's long output, each in
    one view, whose reply `answer(conversation)` gives: the raw model's own in that view (None: the conversation is
    not used). Without `answer`, they end at the question (to be answered in a report). Half the document questions
    come with tools of the catalogue offered, none of which they need."""
    from ..distill.examples import build_examples, build_tool_examples

    rng = Random(f"readings-{seed}")
    unneeded = [t for t in tools if t.domain != "search"]  # a search tool could answer a document question
    documents = [e for e in build_examples(count * 2, seed, tokenizer) if e.kind != "turns"]
    outputs = [e for e in build_tool_examples(count * 2, seed, tokenizer) if e.kind == "tool_result"]
    out = []
    for example in documents[:count - count // 3] + outputs[:count // 3]:
        specs = list(example.tools) or ([t.spec(rng) for t in rng.sample(unneeded, rng.randint(1, 3))]
                                        if rng.random() < 0.5 else [])
        conversation = Conversation(example.kind, example.messages, specs, rng.choice(["full", "comp"]),
                                    {"calls": [], "value": example.answer}, example.policy, example.query)
        if answer is None:
            out.append(conversation)
        elif reply := answer(conversation):
            out.append(replace(conversation, messages=[*example.messages, AssistantMessage(reply)]))
    return out


def render(context: DualContext, conversation: Conversation, tokenizer) -> Rendered:
    """Token ids of the whole conversation in its view, and the spans of its assistant turns (a conversation with
    its own compression policy is rendered with it, not with `context`'s)."""
    attr = "comp_ids" if conversation.view == "comp" else "full_ids"
    if conversation.policy is not None:
        context = DualContext(tokenizer, conversation.policy)
    messages, tools, query = conversation.messages, conversation.tools, conversation.query
    ids = getattr(context.render(messages, tools=tools, query=query, add_generation_prompt=False), attr)
    spans = []
    for index, message in enumerate(messages):
        if isinstance(message, AssistantMessage):
            before = getattr(context.render(messages[:index], tools=tools, query=query, add_generation_prompt=True),
                             attr)
            upto = getattr(context.render(messages[:index + 1], tools=tools, query=query, add_generation_prompt=False),
                           attr)
            if ids[:len(upto)] != upto or upto[:len(before)] != before:
                raise InvalidInputError("This tokenizer's chat template is not append-stable; training needs one that is.")
            end = len(upto)
            while end > len(before) and tokenizer.decode(ids[end - 1:end]).strip() == "":
                end -= 1  # the newline after <|im_end|> belongs to the template, not to the reply
            spans.append((len(before), end))
    return Rendered(conversation.kind, ids, spans)


# -- building one conversation


def _general(rng: Random, tools: list[Tool], questions: list[str], answer) -> Conversation:
    """A question no tool is for, with tools offered anyway (never search tools: they could answer anything)."""
    view = rng.choice(["full", "comp"])
    question = rng.choice(questions)
    offered = rng.sample([t for t in tools if t.domain != "search"], rng.randint(1, 4))
    return _conversation("general", rng, offered, {}, [UserMessage(question), AssistantMessage(answer(question))],
                         view, [])


def _build(kind: str, rng: Random, tools: list[Tool], chains, near_company: float = 0.0) -> Conversation:
    view = rng.choice(["full", "comp"])
    if kind in ("offtopic", "nearmiss"):
        asked = rng.choice([t for t in tools if kind == "offtopic" or _near(t, tools)])
        others = _near(asked, tools) if kind == "nearmiss" else [
            t for t in tools if t.domain not in (asked.domain, "search")]
        offered = rng.sample(others, rng.randint(1, min(4, len(others))))
        question, _ = _ask(asked, rng)
        reply = rng.choice([f"None of the available tools can {asked.task}, so I can't answer that with them.",
                            f"No tool offered here can {asked.task}.",
                            f"Sorry, I don't have a tool to {asked.task}."])
        return _conversation(kind, rng, offered, {}, [UserMessage(question), AssistantMessage(reply)], view, [])
    if kind == "twin":
        return _twin(rng, tools, view)
    if kind == "unstated":
        return _unstated(rng, tools, view)
    if kind == "chain":
        first_name, second_name, slot = rng.choice(chains)
        first, second = (next(t for t in tools if t.name == n) for n in (first_name, second_name))
        country = rng.choice(COUNTRIES)
        capital = first.result({"country": country}, rng)
        wording = {"get_current_weather": "What's the weather like in the capital of {c}?",
                   "city_population": "How many people live in the capital of {c}?",
                   "local_time": "What time is it in the capital of {c}?"}[second_name]
        offered = _offered(rng, tools, [first, second])
        names = _names(rng, offered)
        args2 = {slot: capital}
        result2 = second.result(args2, rng)
        messages = [UserMessage(wording.format(c=country)),
                    _call(names[first.name], {"country": country}), _result(names[first.name], capital),
                    _call(names[second.name], args2, "call_1"), _result(names[second.name], result2, "call_1"),
                    AssistantMessage(_answer(second, args2, result2))]
        return _conversation(kind, rng, offered, names, messages, view, [(names[first.name], {"country": country})])
    tool = rng.choice(tools)
    # the fitting tool among near ones: deciding by what the tools do, not by how far their topic is
    near = kind == "call" and near_company and rng.random() < near_company and _near(tool, tools)
    offered = _offered(rng, near, [tool], at_least_one=True) if near else _offered(rng, tools, [tool])
    names = _names(rng, offered)
    name = names[tool.name]
    if kind == "parallel":
        question, args = _ask(tool, rng, required_only=True)
        other = dict(args)
        varied = next(a for a in tool.args if a.required)
        for _ in range(10):
            other[varied.name] = varied.value(rng)
            if other != args:
                break
        if other == args:
            return _build("call", rng, tools, chains)
        question = _two_values(question, varied.say(args[varied.name]), varied.say(other[varied.name]))
        results = [tool.result(args, rng), tool.result(other, rng)]
        messages = [UserMessage(question), AssistantMessage("", [ToolCall("call_0", name, args), ToolCall("call_1", name, other)]),
                    ToolResult("call_0", name, _text(results[0])), ToolResult("call_1", name, _text(results[1])),
                    AssistantMessage(" ".join(_answer(tool, a, r) for a, r in zip((args, other), results)))]
        return _conversation(kind, rng, offered, names, messages, view, [(name, args), (name, other)])
    question, args = _ask(tool, rng)
    if kind == "error":
        error = rng.choice(ERRORS)
        messages = [UserMessage(question), _call(name, args), ToolResult("call_0", name, f"Error: {error}", True),
                    AssistantMessage(f"The {name} call failed ({error}), so I couldn't {tool.task} right now.")]
        return _conversation(kind, rng, offered, names, messages, view, [(name, args)])
    result = tool.result(args, rng)
    messages = [UserMessage(question), _call(name, args), _result(name, result),
                AssistantMessage(_answer(tool, args, result))]
    return _conversation(kind, rng, offered, names, messages, view, [(name, args)])


def _twin(rng: Random, tools: list[Tool], view: str) -> Conversation:
    """A tool asked, with its own argument values, for what it does not do; offered alone or beside tools of
    unrelated domains, which cannot do it either."""
    tool = rng.choice([t for t in tools if t.name in TWINS])
    template, task = rng.choice(TWINS[tool.name])
    values = {a.name: a.value(rng) for a in tool.args}
    question = template.format(**{a.name: a.say(values[a.name]) for a in tool.args})
    excluded = _neighbourhood(tool.domain) | {"search"}
    others = [t for t in tools if t.domain not in excluded and t.name not in GENERIC]  # none could answer
    offered = [tool] + rng.sample(others, min(len(others), rng.choice([0, 0, 1, 2])))
    rng.shuffle(offered)
    names = _names(rng, offered)
    # the replies do not name the tool: replies that did ("The X tool can only …") came back as answers to results
    reply = rng.choice([f"None of the available tools can {task}, so I can't answer that with them.",
                        f"No tool offered here can {task}.", f"Sorry, I don't have a tool to {task}."])
    return _conversation("twin", rng, offered, names, [UserMessage(question), AssistantMessage(reply)], view, [])


def _unstated(rng: Random, tools: list[Tool], view: str) -> Conversation:
    """A tool's task asked for without the values its required arguments need; the reply asks for them."""
    tool = rng.choice([t for t in tools if _needs_values(t)])
    question = rng.choice(["Can you {}?", "I need to {}.", "Please {} for me.", "Could you help me {}?"]).format(
        tool.task)
    needed = [a.description[0].lower() + a.description[1:] for a in tool.args if a.required and a.type != "boolean"]
    needed = [d if d.startswith("the ") else f"the {d}" for d in needed]
    listed = needed[0] if len(needed) == 1 else f"{', '.join(needed[:-1])} and {needed[-1]}"
    reply = rng.choice([f"I can do that, but I need {listed} first. Could you tell me?",
                        f"Sure. What {'is' if len(needed) == 1 else 'are'} {listed}?",
                        f"To do that I need {listed}; you haven't given {'it' if len(needed) == 1 else 'them'} yet."])
    offered = _offered(rng, [t for t in tools if t.domain != "search"], [tool])
    return _conversation("unstated", rng, offered, {}, [UserMessage(question), AssistantMessage(reply)], view, [])


def _needs_values(tool: Tool) -> bool:
    """Whether asking for `tool`'s task without values leaves it nothing to call with (search and arithmetic tools
    take the question's own words)."""
    return tool.domain != "search" and tool.name not in GENERIC and any(
        a.required and a.type != "boolean" for a in tool.args)


def _conversation(kind, rng, offered: list[Tool], names: dict, messages, view, calls) -> Conversation:
    names = names or _names(rng, offered)
    return Conversation(kind, messages, [t.spec(rng, names[t.name]) for t in offered], view,
                        {"calls": [{"name": n, "arguments": a} for n, a in calls]})


def _near(asked: Tool, tools: list[Tool]) -> list[Tool]:
    """Tools near `asked`'s topic that cannot answer its questions: its domain's others and its neighbours'."""
    nearby = _neighbourhood(asked.domain)
    return [t for t in tools if t.domain in nearby and t.name != asked.name and t.name not in GENERIC]


def _neighbourhood(domain: str) -> set[str]:
    """`domain` and the domains near it (`NEIGHBOURS`)."""
    return next((g for g in NEIGHBOURS if domain in g), {domain})


def _offered(rng: Random, tools: list[Tool], needed: list[Tool], at_least_one: bool = False) -> list[Tool]:
    others = [t for t in tools if t not in needed]
    count = rng.randint(1, 4) if at_least_one else rng.choice([0, 0, 1, 2, 3, 4])
    offered = needed + rng.sample(others, min(len(others), count))
    rng.shuffle(offered)
    return offered


def _names(rng: Random, offered: list[Tool]) -> dict[str, str]:
    """Tool name as offered: mostly as written, sometimes namespaced by domain or camelCase."""
    style = rng.random()
    if style < 0.15:
        return {t.name: f"{t.domain}.{t.name}" for t in offered}
    if style < 0.25:
        return {t.name: f"{t.domain}_{t.name}" for t in offered}
    if style < 0.33:
        return {t.name: re.sub(r"_(\w)", lambda m: m.group(1).upper(), t.name) for t in offered}
    return {t.name: t.name for t in offered}


def _ask(tool: Tool, rng: Random, required_only: bool = False) -> tuple[str, dict]:
    """A question and the call arguments it states: the required ones and the optional ones its wording mentions."""
    templates = list(tool.asks)
    if required_only:
        optional = {a.name for a in tool.args if not a.required}
        templates = [t for t in templates if not optional & set(re.findall(r"{(\w+)}", t))] or templates[:1]
    template = rng.choice(templates)
    mentioned = set(re.findall(r"{(\w+)}", template))
    args = {a.name: a.value(rng) for a in tool.args if a.required or a.name in mentioned}
    spoken = {a.name: a.say(args[a.name]) for a in tool.args if a.name in args}
    question = template.format(**spoken)
    if rng.random() < 0.2:
        question = rng.choice(["Hi! ", "Quick question: ", "Please help. ", "Hey, "]) + question[0].lower() + question[1:]
    return question, args


def _two_values(question: str, first: str, second: str) -> str:
    return question.replace(first, f"{first} and {second}", 1) if first in question else f"{question} Also for {second}."


def _call(name: str, args: dict, id_: str = "call_0") -> AssistantMessage:
    return AssistantMessage("", [ToolCall(id_, name, args)])


def _result(name: str, result, id_: str = "call_0") -> ToolResult:
    return ToolResult(id_, name, _text(result))


def _text(result) -> str:
    return result if isinstance(result, str) else json.dumps(result)


def _answer(tool: Tool, args: dict, result) -> str:
    spoken = {a.name: a.say(args[a.name]) for a in tool.args if a.name in args}
    return tool.answer.format(result=_text(result) if not isinstance(result, list) else ", ".join(map(str, result)),
                              r=result if isinstance(result, dict) else {}, **spoken)
