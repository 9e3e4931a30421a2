"""The LangGraph agent of langgraph_agent.py on LangChain's stock `ChatOpenAI`, pointed at `asymspec serve`.

Any OpenAI client can talk to an AsymSpec pair: this example starts `asymspec serve` on 127.0.0.1 (or uses
`--base-url` of one already running), builds `ChatOpenAI(base_url=..., model="asymspec")` and runs the same agent
(one forced search, then the answer). The server renders the full and compressed views, decodes with AsymSpec and
returns OpenAI tool calls; `usage.prompt_tokens` is what its verifier read.

    asymspec serve --port 8000 &                       # in another terminal, or let the example start one
    python examples/openai_server_agent.py [--base-url http://127.0.0.1:8000/v1] [--tool-calls 1]
"""

from __future__ import annotations

import argparse
import contextlib
import time

from langchain_core.messages import AIMessage, HumanMessage
from langchain_openai import ChatOpenAI
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from asymspec_agents.server.process import ServerProcess, server_health
from langgraph_agent import QUESTION, ReferenceSearch, build_agent, make_tools, print_message, python_reference


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", help="a running server's /v1 address; default: start one on 127.0.0.1")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--tool-calls", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    console = Console()
    with contextlib.ExitStack() as stack:
        base_url = args.base_url
        if base_url is None:
            console.print("starting asymspec serve on 127.0.0.1 ...")
            base_url = stack.enter_context(ServerProcess()).base_url
        llm = ChatOpenAI(base_url=base_url, api_key="unused", model="asymspec", max_tokens=args.max_tokens,
                         temperature=0, stream_usage=True)
        agent = build_agent(llm, make_tools(ReferenceSearch(python_reference())), calls=args.tool_calls)
        console.print(f"[bold]Question:[/bold] {args.question}  [dim](ChatOpenAI → {base_url})[/dim]\n")
        started = time.perf_counter()
        messages = agent.invoke({"messages": [HumanMessage(args.question)]})["messages"]
        for message in messages:
            print_message(console, message, "model")
        console.print()
        console.print(usage_table(messages))
        pool = server_health(base_url)["cache_pool"]
        console.print(f"total {time.perf_counter() - started:.1f} s; server cache pool: {pool['calls']} calls, "
                      f"{pool['continued']} continued their conversation's cache ({pool['hit_rate']:.0%})")


def usage_table(messages) -> Table:
    """Per model call: what ChatOpenAI's usage says (prompt tokens = what the server's verifier read)."""
    table = Table(title="ChatOpenAI usage per step (from asymspec serve)", width=80)
    for column, width in (("step", 4), ("model output", None), ("prompt tok", 10), ("output tok", 10)):
        table.add_column(column, justify="left" if width is None else "right", no_wrap=True, overflow="ellipsis",
                         min_width=width or 12, ratio=None if width else 1)
    for number, message in enumerate((m for m in messages if isinstance(m, AIMessage)), 1):
        did = ", ".join(call["name"] for call in message.tool_calls) or f"answer: {message.text.strip()[:40]!r}"
        usage = message.usage_metadata or {}
        table.add_row(str(number), escape(did), str(usage.get("input_tokens", "?")), str(usage.get("output_tokens", "?")))
    return table


if __name__ == "__main__":
    main()
