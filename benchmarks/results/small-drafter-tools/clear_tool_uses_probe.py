"""A fact in a tool output that LangChain's ClearToolUsesEdit cleared from the verifier's view: five systems, two
phrasings of the question, with the shipped `bundled-small` (the README's "LangChain" section).

    python benchmarks/results/small-drafter-tools/clear_tool_uses_probe.py
"""
import sys
from pathlib import Path

# the handbook tool and the example's ToolBudget come from the middleware tests
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "integrations/langchain/tests/integration_tests"))
from langchain.agents import create_agent
from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware
from langchain_core.messages import HumanMessage
from langchain_asymspec import AsymSpecMiddleware, ChatAsymSpec
from conftest import load_example
from test_middleware import read_handbook
example = load_example("langgraph_agent")
systems = {"verifier alone": dict(drafter="bundled", mode="compressed"),
           "paper rule": dict(drafter="bundled-small", fuse_bonus=False),
           "paper + fuse_bonus": dict(drafter="bundled-small", fuse_bonus=True),
           "fused rule": dict(drafter="bundled-small", acceptance="fused"),
           "ceiling": dict(drafter="bundled", mode="full")}
phrasings = ["Now answer: what is the access code?", "What is the access code of the server room? Give the code."]
for name, cfg in systems.items():
    for p in phrasings:
        llm = ChatAsymSpec(verifier="bundled", max_tokens=32, **cfg)
        budget = example.ToolBudget(1, answer_prompt=p)
        clear = ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=300, keep=0)])
        agent = create_agent(llm, [read_handbook], middleware=[AsymSpecMiddleware(), clear, budget])
        last = agent.invoke({"messages": [HumanMessage("Read the handbook: I need the server room's access code.")]})["messages"][-1]
        acc = last.response_metadata["asymspec"].get("acceptance_rate")
        print(f"{name:20s} {'OK' if '5969' in last.content else 'no':3s} acc={acc} {last.content[:70]!r}", flush=True)
