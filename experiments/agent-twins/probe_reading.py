"""Diagnosis: the LangGraph example's agent (one forced search, then the answer; the default pair, greedy) on ten
Python-reference questions written for this check. Run from the repository root:

    OMP_NUM_THREADS=1 python experiments/agent-twins/probe_reading.py LABEL

It uses the installed `bundled-agent`; the twins verifier was probed with its delta copied over
asymspec_agents/models/verifiers/bundled-agent/delta.safetensors (the assembled model's cache follows the delta)."""
import sys
from pathlib import Path

from langchain_asymspec import ChatAsymSpec
from langchain_core.messages import HumanMessage, ToolMessage

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
import langgraph_agent as example  # noqa: E402

# (question, the word a right answer names): each answer is one section of the reference away
QUESTIONS = [
    ("Which exception does a failing assert statement raise?", "AssertionError"),
    ("Which statement is a null operation?", "pass"),
    ("Which statement continues with the next cycle of the nearest enclosing loop?", "continue"),
    ("Which statement terminates the nearest enclosing loop?", "break"),
    ("Which exception is raised when dividing by zero?", "ZeroDivisionError"),
    ("Which exception is raised when an attribute reference fails?", "AttributeError"),
    ("Which exception does a missing dictionary key raise?", "KeyError"),
    ("Which keyword makes a name refer to the module's global variable?", "global"),
    ("Which keyword creates an anonymous function?", "lambda"),
    ("Which exception does an exhausted iterator raise?", "StopIteration"),
]


def main(label: str) -> None:
    tools = example.make_tools(example.ReferenceSearch(example.python_reference()))
    llm = ChatAsymSpec(max_tokens=64)
    right = found = 0
    for question, expected in QUESTIONS:
        out = example.build_agent(llm, tools).invoke({"messages": [HumanMessage(question)]})
        result = " ".join(m.text for m in out["messages"] if isinstance(m, ToolMessage))
        answer = out["messages"][-1].text.strip()
        found += expected in result
        right += expected in answer
        print(f"{expected in result!s:5} {expected in answer!s:5} {expected:18} {answer[:90]!r}", flush=True)
    print(f"{label}: answer right {right}/{len(QUESTIONS)}, result held it {found}/{len(QUESTIONS)}")


if __name__ == "__main__":
    main(sys.argv[1])
