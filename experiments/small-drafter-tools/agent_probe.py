"""The answer in a long tool output, inside a real LangChain agent: Floor, AsymSpec (paper rule with and without
the fused bonus) and Ceiling on the demo's planted document, returned by one forced, argument-free tool call.

    python experiments/small-drafter-tools/agent_probe.py DRAFTER [FIRST_SEED] [END_SEED]

DRAFTER is `bundled-small` or a folder `asymspec distill-drafter` wrote. The verifier keeps the head and tail of
the tool output (400 tokens of about 1.6k). Prints one block per seed: the code, then each system's verdict, time,
tool calls made and reply.
"""
import random
import sys
import time
from pathlib import Path

import torch
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from asymspec_agents.context import CompressionPolicy
from langchain_asymspec import ChatAsymSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))
from demo import planted_document  # noqa: E402
from langgraph_agent import ToolBudget  # noqa: E402

QUESTION = "what is the access code of the server room?"
SYSTEMS = {"floor": dict(mode="compressed"), "asym": dict(fuse_bonus=True), "asym-paper": {}, "ceiling": dict(mode="full")}


def main(drafter: str, first: int = 0, end: int = 3) -> None:
    torch.set_num_threads(1)
    policy = CompressionPolicy(budgets={"tool_result": 400}, compressors={"tool_result": "head_tail"})
    for seed in range(first, end):
        report, code = planted_document(random.Random(seed), 7000)

        @tool
        def read_facility_notes() -> str:
            """Read the facility notes."""
            return report

        rows = []
        for name, settings in SYSTEMS.items():
            llm = ChatAsymSpec(verifier="bundled", drafter=drafter, max_tokens=32, compression=policy, **settings)
            agent = create_agent(llm, [read_facility_notes],
                                 middleware=[ToolBudget(1, answer_prompt=f"Now answer: {QUESTION}")])
            started = time.perf_counter()
            messages = agent.invoke({"messages": [HumanMessage(
                f"Read the facility notes: {QUESTION} Answer with the four-digit code.")]})["messages"]
            calls = sum(bool(getattr(m, "tool_calls", None)) for m in messages)
            answer = messages[-1].content
            rows.append(f"{name}: {'OK ' if code in answer else 'no '}{time.perf_counter() - started:.1f}s "
                        f"calls={calls} {answer[:60]!r}")
        print(seed, code, *rows, sep="\n  ", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:4]))
