"""A fact in a tool output that LangChain's ClearToolUsesEdit cleared from the verifier's view: five systems, two
phrasings of the question, with the shipped `bundled-small` (docs/langchain.md).

    python experiments/small-drafter-tools/clear_tool_uses_probe.py
"""
import sys
from pathlib import Path

# the handbook agent comes from the middleware tests
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "integrations/langchain/tests/integration_tests"))
from langchain_core.messages import HumanMessage
from langchain_asymspec import ChatAsymSpec
from conftest import load_example
from test_middleware import HANDBOOK_REQUEST, cleared_handbook_agent
example = load_example("langgraph_agent")
systems = {"verifier alone": dict(drafter="bundled", mode="compressed"),
           "paper rule": dict(drafter="bundled-small", fuse_bonus=False),
           "paper + fuse_bonus": dict(drafter="bundled-small", fuse_bonus=True),
           "fused rule": dict(drafter="bundled-small", acceptance="fused"),
           "ceiling": dict(drafter="bundled", mode="full")}
phrasings = ["Now answer: what is the access code?", "What is the access code of the server room? Give the code."]
for name, cfg in systems.items():
    for p in phrasings:
        agent = cleared_handbook_agent(ChatAsymSpec(verifier="bundled", max_tokens=32, **cfg), example, p)
        last = agent.invoke({"messages": [HumanMessage(HANDBOOK_REQUEST)]})["messages"][-1]
        acc = last.response_metadata["asymspec"].get("acceptance_rate")
        print(f"{name:20s} {'OK' if '5969' in last.content else 'no':3s} acc={acc} {last.content[:70]!r}", flush=True)
