"""A LlamaIndex FunctionAgent on AsymSpecLLM with two real tools: a search over Python's own reference docs
(`pydoc_data.topics`, BM25) and a calculator. Runs offline on the default pair (bundled-agent verifying for
bundled-agent-small).

    python examples/llamaindex_agent.py [--max-new-tokens 64]

The only AsymSpec-specific line is the model object. `initial_tool_choice="required"` makes the first step a tool
call (grammar-constrained: the name is one of the tools, the arguments valid JSON of its schema; the calculator's
pattern asks for at least one operator). Under "auto" the pair calls the calculator by itself for the arithmetic
question, but asked the reference question it replies that no tool can check exceptions (as it does in
examples/langgraph_agent.py), hence the required first call. The agent then runs as usual. Prints every tool call
and result, the answer, and the speculation stats of each LLM step; both answers are right ("629",
"AssertionError"). Still beyond the 135M pair: answering "What does the nonlocal statement do?" from a search (it
searches again and again), see docs/agents.md.
"""

import argparse
import ast
import asyncio
import operator
import time
from typing import Annotated

from pydantic import BaseModel, Field

# (question, what a right answer states): the calculator's result, and what the reference's "assert" section says
QUESTIONS = [
    ("What is 37 * (12 + 5)?", "629"),
    ("Which exception does a failing assert statement raise?", "AssertionError"),
]


def make_tools():
    import bm25s
    from llama_index.core.tools import FunctionTool
    from pydoc_data.topics import topics

    keys = sorted(topics)
    index = bm25s.BM25()
    index.index(bm25s.tokenize([f"{key} {topics[key]}" for key in keys], stopwords="en", show_progress=False),
                show_progress=False)

    def search_python_docs(query: Annotated[str, Field(description="Keywords to look up, e.g. 'with statement'")]) -> str:
        """Search the Python language reference for a keyword, e.g. 'yield'; returns the best-matching section."""
        words = query.replace("_", " ")  # models often write queries as identifiers ("failing_assert")
        found, _ = index.retrieve(bm25s.tokenize([words], stopwords="en", show_progress=False), k=1,
                                  show_progress=False)
        key = keys[found[0][0]]
        return f"[{key}]\n{topics[key][:1200]}"

    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression such as '12 * (3 + 4)'."""
        return str(evaluate(expression))

    # An explicit schema: its `pattern` reaches the grammar, so the model can only write digits and operators here.
    return [FunctionTool.from_defaults(search_python_docs), FunctionTool.from_defaults(calculator, fn_schema=CalculatorInput)]


NUMBER = r"\(*[0-9]{1,9}(\.[0-9]{1,6})?\)*"
EXPRESSION = rf"^{NUMBER}( ?[-+*/] ?{NUMBER}){{1,8}}$"  # 2-9 numbers joined by operators (parentheses may not balance)


class CalculatorInput(BaseModel):
    expression: str = Field(description="Arithmetic with + - * / and parentheses", pattern=EXPRESSION)


OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
             ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos}


def evaluate(expression: str) -> float | int:
    """Arithmetic only: numbers and + - * / ** with parentheses (no names, no calls)."""

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.operand))
        raise ValueError(f"not plain arithmetic: {ast.unparse(node)!r}")

    return value(ast.parse(expression, mode="eval").body)


async def ask(agent, question: str) -> dict:
    from llama_index.core.agent.workflow import AgentOutput, ToolCallResult

    started = time.perf_counter()
    handler = agent.run(question)
    calls, steps = [], []
    async for event in handler.stream_events():
        if isinstance(event, ToolCallResult):
            calls.append((event.tool_name, event.tool_kwargs, str(event.tool_output.content)))
        elif isinstance(event, AgentOutput) and event.raw:
            steps.append(event.raw)
    output = await handler
    return {"answer": str(output.response.content or ""), "calls": calls, "steps": steps,
            "seconds": time.perf_counter() - started}


async def main(max_new_tokens: int) -> None:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.llms.asymspec import AsymSpecLLM

    llm = AsymSpecLLM(max_new_tokens=max_new_tokens)  # the one line: the default pair
    agent = FunctionAgent(tools=make_tools(), llm=llm, initial_tool_choice="required", allow_parallel_tool_calls=False,
                          system_prompt="You are a helpful assistant. Use the tools, then answer in one sentence.")
    for question, _ in QUESTIONS:
        result = await ask(agent, question)
        print(f"\nQ: {question}")
        for name, arguments, output in result["calls"]:
            print(f"  tool {name}({arguments}) -> {output[:100]!r}")
        print(f"A: {result['answer'][:400]}")
        for number, raw in enumerate(result["steps"], 1):
            stats, usage = raw["stats"], raw["usage"]
            print(f"  step {number}: {usage['full_prompt_tokens']} full / {usage['prompt_tokens']} compressed prompt tokens, "
                  f"{usage['completion_tokens']} new, acceptance {stats['acceptance_rate']:.0%}, "
                  f"decision points {stats['decision_points']} (at slot 0: {stats['decision_points_at_slot0']})")
        print(f"  {result['seconds']:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    asyncio.run(main(parser.parse_args().max_new_tokens))
