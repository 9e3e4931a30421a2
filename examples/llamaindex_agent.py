"""A LlamaIndex FunctionAgent on AsymSpecLLM with two real tools: a search over Python's own reference docs
(`pydoc_data.topics`, BM25) and a calculator. Runs offline on the bundled SmolLM2-135M-Instruct.

    python examples/llamaindex_agent.py [--max-new-tokens 96]

The only AsymSpec-specific line is the model object. `initial_tool_choice="required"` makes the first step a
tool call (grammar-constrained: the name is one of the tools, the arguments valid JSON of its schema); the agent
then runs as usual. Prints every tool call and result, the answer, and the speculation stats of each LLM step.
A 135M model is a weak agent: expect it to pick tools and arguments sensibly more often than it answers well.
"""

import argparse
import ast
import asyncio
import operator
import time
from typing import Annotated

from pydantic import BaseModel, Field

QUESTIONS = [
    "What is 37 * (12 + 5)?",
    "What does the nonlocal statement do in Python?",
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
        """Search the Python language reference and return the start of the best matching section."""
        found, _ = index.retrieve(bm25s.tokenize([query], stopwords="en", show_progress=False), k=1, show_progress=False)
        key = keys[found[0][0]]
        return f"[{key}]\n{topics[key][:1200]}"

    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression such as '12 * (3 + 4)'."""
        return str(evaluate(expression))

    # An explicit schema: its `pattern` reaches the grammar, so the model can only write digits and operators here.
    return [FunctionTool.from_defaults(search_python_docs), FunctionTool.from_defaults(calculator, fn_schema=CalculatorInput)]


NUMBER = r"\(*[0-9]{1,9}(\.[0-9]{1,6})?\)*"
EXPRESSION = rf"^{NUMBER}( ?[-+*/] ?{NUMBER}){{0,8}}$"  # numbers joined by operators (parentheses may not balance)


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

    llm = AsymSpecLLM(verifier="bundled", drafter="bundled", max_new_tokens=max_new_tokens)  # the one line
    agent = FunctionAgent(tools=make_tools(), llm=llm, initial_tool_choice="required", allow_parallel_tool_calls=False,
                          system_prompt="You are a helpful assistant. Use the tools, then answer in one sentence.")
    for question in QUESTIONS:
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
