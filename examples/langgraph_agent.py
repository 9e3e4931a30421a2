"""A ReAct-style LangGraph agent on ChatAsymSpec, offline on the default pair (bundled-agent, bundled-agent-small).

The agent answers a question about Python by searching Python's own language reference (the `pydoc_data.topics`
texts that ship with every CPython), then answers from what it read: "Which exception does a failing assert
statement raise?" -> search_python_docs -> "AssertionError". The tool output is a whole reference section: the
drafter reads it in full, the verifier reads a BM25-compressed memory of it.

The default pair does not decide by itself to search for this question (it replies that no tool can check
exceptions), so a small middleware sets `tool_choice`: "any" until the agent has made `--tool-calls` calls for this
question, then "none", and the model answers from the tool's result. Which tool and which arguments stay the
model's choice (grammar-constrained to the bound tools and their schemas). What the 135M pair cannot do yet (answer
"What do 'break' and 'continue' do?" from two searches; answer after an added "now answer" request) is in
docs/agents.md.

    python examples/langgraph_agent.py [--question "..."] [--tool-calls 1] [--max-tokens 64]

Prints every step (tool calls, tool results, the answer) and a table of per-step speculation stats.
"""

from __future__ import annotations

import argparse
import ast
import operator
import time

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from langchain_asymspec import ChatAsymSpec

QUESTION = "Which exception does a failing assert statement raise?"
SYSTEM = "You are a helpful assistant. Use the tools to look things up before answering."


# ---------------------------------------------------------------------------------------------------------------
# Tools: a search over Python's reference docs, and a calculator


def python_reference() -> dict[str, str]:
    """Python's language reference, topic -> text (the sections `help("topic")` shows)."""
    from pydoc_data.topics import topics

    return dict(topics)


class ReferenceSearch:
    """BM25 over the reference sections; `search(query)` returns the best `k` sections, titled, in full."""

    def __init__(self, docs: dict[str, str], k: int = 1, max_chars: int = 4000):
        import bm25s

        self.titles = list(docs)
        self.texts = [docs[title] for title in self.titles]
        self.k, self.max_chars = k, max_chars
        self.retriever = bm25s.BM25()
        self.retriever.index(bm25s.tokenize([f"{t} {t} {text}" for t, text in zip(self.titles, self.texts)],
                                            stopwords="en", show_progress=False), show_progress=False)

    def search(self, query: str) -> str:
        import bm25s

        # words joined by "_" (models often write queries as identifiers) are looked up one by one
        tokens = bm25s.tokenize([query.replace("_", " ")], stopwords="en", show_progress=False)
        if not tokens.ids[0]:
            return "No match: search with a keyword such as 'break' or 'yield'."
        results, _ = self.retriever.retrieve(tokens, k=self.k, show_progress=False)
        sections = [f"[{self.titles[int(i)]}]\n{self.texts[int(i)]}" for i in results[0]]
        return "\n\n".join(sections)[: self.max_chars]


_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.Pow: operator.pow, ast.Mod: operator.mod, ast.FloorDiv: operator.floordiv, ast.USub: operator.neg}


def calculate(expression: str) -> float:
    """Evaluate + - * / // % ** and parentheses on numbers; anything else is a ValueError."""
    def walk(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](walk(node.operand))
        raise ValueError(f"not arithmetic: {ast.unparse(node)}")
    return walk(ast.parse(expression, mode="eval").body)


def make_tools(search: ReferenceSearch) -> list:
    @tool
    def search_python_docs(query: str) -> str:
        """Search the Python language reference for a keyword, e.g. 'yield'; returns the best-matching section."""
        return search.search(query)

    @tool
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression (numbers, + - * / ** and parentheses)."""
        try:
            return str(calculate(expression))
        except (ValueError, SyntaxError, ZeroDivisionError) as exc:
            return f"Error: {exc}"

    return [search_python_docs, calculator]


# ---------------------------------------------------------------------------------------------------------------
# The agent


class ToolBudget(AgentMiddleware):
    """Force a tool call until `calls` were made since the last user message, then forbid tools (sync and async
    agents alike). `answer_prompt`, when given, is added (for the model only, not stored) to ask for the answer;
    the default pair answers best without one, straight after the tool's result."""

    def __init__(self, calls: int, answer_prompt: str | None = None):
        super().__init__()
        self.calls, self.answer_prompt = calls, answer_prompt

    def wrap_model_call(self, request, handler):
        return handler(self.choose(request))

    async def awrap_model_call(self, request, handler):
        return await handler(self.choose(request))

    def choose(self, request):
        made = 0
        for message in reversed(request.messages):
            if isinstance(message, HumanMessage):
                break
            made += isinstance(message, ToolMessage)
        if made < self.calls:
            return request.override(tool_choice="any")
        if self.answer_prompt is None:
            return request.override(tool_choice="none")
        return request.override(tool_choice="none", messages=[*request.messages, HumanMessage(self.answer_prompt)])


def build_agent(llm: ChatAsymSpec, tools: list, calls: int = 1, checkpointer=None):
    return create_agent(llm, tools, system_prompt=SYSTEM, middleware=[ToolBudget(calls)], checkpointer=checkpointer)


def print_message(console: Console, message, who: str) -> None:
    """One line per tool call, answer or tool result, as `who` (the graph node) produced it."""
    if isinstance(message, AIMessage) and message.tool_calls:
        for call in message.tool_calls:
            console.print(f"[cyan]{who}[/cyan] calls {call['name']}({escape(str(call['args']))})")
    elif isinstance(message, AIMessage):
        console.print(f"[cyan]{who}[/cyan] answers: {escape(message.text.strip())}")
    elif isinstance(message, ToolMessage):
        first = message.text.strip().splitlines()[0] if message.text.strip() else ""
        console.print(f"[magenta]{message.name}[/magenta] returned {len(message.text)} chars: {escape(first[:80])}")


def step_rows(messages) -> list[dict]:
    """One row per AI message: what it did and its speculation stats."""
    rows = []
    for message in messages:
        if not isinstance(message, AIMessage):
            continue
        stats = message.response_metadata["asymspec"]
        did = ", ".join(f"{c['name']}({', '.join(f'{k}={v!r}' for k, v in c['args'].items())})"
                        for c in message.tool_calls) or f"answer: {message.text.strip()[:60]!r}"
        rows.append({"did": did, **stats, "output_tokens": message.usage_metadata["output_tokens"]})
    return rows


def stats_table(rows: list[dict]) -> Table:
    """One row per model call; fits an 80-column terminal (the step's text is cut to the room left)."""
    table = Table(title="ChatAsymSpec per-step speculation stats", width=80)
    for column, width in (("step", 4), ("model output", None), ("accepted", 9), ("dec (slot 0)", 12),
                          ("in full→comp", 12), ("out", 3), ("s", 4)):
        table.add_column(column, justify="left" if width is None else "right", no_wrap=True, overflow="ellipsis",
                         min_width=width or 12, ratio=None if width else 1)
    for number, row in enumerate(rows, 1):
        table.add_row(str(number), escape(row["did"]), f"{row['acceptance_rate']:.0%} {row['accepted']}/{row['drafted']}",
                      f"{row['decision_points']} ({row['decision_points_at_slot0']})",
                      f"{row['full_input_tokens']}→{row['compressed_input_tokens']}", str(row["output_tokens"]),
                      f"{row['wall_seconds']:.1f}")
    return table


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--tool-calls", type=int, default=1, help="tool calls the agent makes before answering")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)

    console = Console()
    llm = ChatAsymSpec(max_tokens=args.max_tokens)
    agent = build_agent(llm, make_tools(ReferenceSearch(python_reference())), calls=args.tool_calls)
    console.print(f"[bold]Question:[/bold] {args.question}\n")
    started = time.perf_counter()
    messages = []
    for update in agent.stream({"messages": [HumanMessage(args.question)]}, stream_mode="updates"):
        for node, state in update.items():
            for message in (state or {}).get("messages", []):
                messages.append(message)
                print_message(console, message, node)
    console.print()
    console.print(stats_table(step_rows(messages)))
    console.print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
