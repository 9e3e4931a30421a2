"""A LangChain tool-calling workflow on ChatAsymSpec, offline on the default pair (bundled-agent verifying for
bundled-agent-small).

Three steps, each one runnable:
  1. `prompt | llm.bind_tools([convert_units, calculator], tool_choice="any")` picks a tool and its arguments
     (grammar-constrained: a bound tool's name, arguments valid under its JSON schema: unit names from the enum,
     an expression of numbers and operators from the calculator's pattern);
  2. the chosen tool runs, and its result goes back as a ToolMessage;
  3. `llm.with_structured_output(Answer)` turns the conversation into a typed `Answer` (Pydantic), again under a
     grammar, so the result always parses.

"What is 37 * (12 + 5)?" -> calculator("37 * (12 + 5)") -> 629 -> Answer(result=629.0). A unit conversion is beyond
the 135M pair: for "How many kilometres is 12 miles?" it calls convert_units with from_unit "km" (the enum's first
value) in every variant tried (docs/agents.md); and with the answer's field named `value` instead of `result` it
copies 37 from the question. `--question` runs any question through the same three steps.

    python examples/tool_calling_workflow.py [--question "..."]
"""

from __future__ import annotations

import argparse
import time
from typing import Literal

from langchain_core.messages import HumanMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool
from pydantic import BaseModel, Field
from rich.console import Console
from rich.markup import escape

from langchain_asymspec import ChatAsymSpec

QUESTION = "What is 37 * (12 + 5)?"
FACTORS = {"km": 1000.0, "m": 1.0, "mile": 1609.344, "foot": 0.3048}


@tool
def convert_units(value: float, from_unit: Literal["km", "m", "mile", "foot"],
                  to_unit: Literal["km", "m", "mile", "foot"]) -> str:
    """Convert a length from one unit to another."""
    return f"{value} {from_unit} = {value * FACTORS[from_unit] / FACTORS[to_unit]:.3f} {to_unit}"


NUMBER = r"\(*[0-9]{1,9}(\.[0-9]{1,6})?\)*"


class Expression(BaseModel):
    expression: str = Field(description="numbers joined by + - * / with parentheses",
                            pattern=rf"^{NUMBER}( ?[-+*/] ?{NUMBER}){{1,8}}$")  # reaches the grammar


@tool(args_schema=Expression)
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as '2 * (3 + 4)'."""
    import ast

    node = ast.parse(expression, mode="eval")
    if not all(isinstance(n, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.operator, ast.unaryop))
               for n in ast.walk(node)):
        return "Error: only arithmetic is allowed"
    return str(eval(compile(node, "<expr>", "eval"), {"__builtins__": {}}))


class Answer(BaseModel):
    """The final answer to the user's question."""

    result: float = Field(description="the number the tool returned")


TOOLS = {t.name: t for t in (convert_units, calculator)}


def run(question: str, llm: ChatAsymSpec, console: Console | None = None) -> dict:
    """Run the workflow; returns the messages, the tool results and the structured answer."""
    say = console.print if console is not None else (lambda *a, **k: None)
    prompt = ChatPromptTemplate.from_messages([("system", "You answer with the tools."), ("human", "{question}")])
    pick_tool = prompt | llm.bind_tools(list(TOOLS.values()), tool_choice="any")
    ai = pick_tool.invoke({"question": question})
    say(f"[bold]1. tool call[/bold] {escape(str(ai.tool_calls))}  {_stats(ai)}")
    results = [TOOLS[call["name"]].invoke(call) for call in ai.tool_calls]
    for result in results:
        say(f"[bold]2. {result.name}[/bold] returned {escape(repr(result.content))}")
    messages = [HumanMessage(question), ai, *results]
    structured = llm.with_structured_output(Answer, include_raw=True).invoke(messages)
    say(f"[bold]3. structured answer[/bold] {escape(repr(structured['parsed']))}  {_stats(structured['raw'])}")
    return {"tool_call_message": ai, "tool_results": results, "answer": structured["parsed"], "raw": structured["raw"]}


def _stats(message) -> str:
    s = message.response_metadata["asymspec"]
    return (f"(acceptance {s['acceptance_rate']:.0%}, {s['accepted']}/{s['drafted']} drafted accepted, "
            f"{s['decision_points']} decision points at slot 0: {s['decision_points_at_slot0']}, "
            f"input {s['full_input_tokens']} full / {s['compressed_input_tokens']} compressed tokens, {s['wall_seconds']:.1f} s)")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    console = Console()
    started = time.perf_counter()
    console.print(f"[bold]Question:[/bold] {args.question}")
    run(args.question, ChatAsymSpec(max_tokens=args.max_tokens), console)
    console.print(f"total {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
