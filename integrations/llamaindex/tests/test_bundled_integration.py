"""AsymSpecLLM on the bundled SmolLM2-135M-Instruct: LlamaIndex agents over real tools, the query engine, examples.

These pin the mechanics (calls made with grammar-valid arguments, results rendered back into the next step,
a final answer, usage and stats on every step). A 135M model answers badly often; the answers are printed
(`pytest -s`) but only checked where greedy decoding makes them a fixed, sensible output.
"""

import asyncio
import importlib.util
import re
import time
from pathlib import Path

import pytest
from llama_index.core.agent.workflow import AgentInput, AgentOutput, FunctionAgent, ReActAgent, ToolCallResult
from llama_index.llms.asymspec import AsymSpecLLM, AsymSpecQueryEngine

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[3]


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def agent_example():
    return load_example("llamaindex_agent")


@pytest.fixture(scope="module")
def tools(agent_example):
    return {tool.metadata.name: tool for tool in agent_example.make_tools()}


@pytest.fixture(scope="module")
def llm():
    return AsymSpecLLM(verifier="bundled", drafter="bundled", max_new_tokens=64)


async def run_agent(agent, question: str) -> dict:
    handler = agent.run(question)
    events = [event async for event in handler.stream_events()]
    output = await handler
    return {"output": output, "inputs": [e.input for e in events if isinstance(e, AgentInput)],
            "results": [e for e in events if isinstance(e, ToolCallResult)],
            "steps": [e for e in events if isinstance(e, AgentOutput)]}


def check_results_reach_the_next_step(run: dict) -> None:
    """Every tool result is a tool message, with its call's id, in the input of a later LLM step."""
    for result in run["results"]:
        later = [m for step_input in run["inputs"] for m in step_input if m.role == "tool"
                 and m.additional_kwargs.get("tool_call_id") == result.tool_id]
        assert later and later[0].content == str(result.tool_output.content)


def check_stats_on_every_step(run: dict) -> None:
    for step in run["steps"]:
        usage, stats = step.raw["usage"], step.raw["stats"]
        assert usage["completion_tokens"] == stats["new_tokens"] > 0
        assert usage["full_prompt_tokens"] >= usage["prompt_tokens"] > 0 and stats["mode"] == "asymmetric"
        assert len(stats["token_slots"]) == stats["new_tokens"] and stats["blocks"] > 0


def test_function_agent_searches_the_python_reference(llm, tools):
    agent = FunctionAgent(tools=list(tools.values()), llm=llm, initial_tool_choice="search_python_docs",
                          allow_parallel_tool_calls=False,
                          system_prompt="You are a helpful assistant. Answer from the search results in one sentence.")
    run = asyncio.run(run_agent(agent, "What does the nonlocal statement do in Python?"))
    first = run["results"][0]
    assert first.tool_name == "search_python_docs" and set(first.tool_kwargs) == {"query"}
    assert str(first.tool_output.content).startswith("[")  # a section of pydoc_data.topics came back
    print(f"\nquery: {first.tool_kwargs['query']!r} -> {str(first.tool_output.content)[:60]!r}")
    check_results_reach_the_next_step(run)
    check_stats_on_every_step(run)
    after = run["steps"][1].raw["usage"]
    assert after["full_prompt_tokens"] > run["steps"][0].raw["usage"]["full_prompt_tokens"] + 100  # the section is read
    answer = run["output"].response.content
    print(f"answer: {answer!r}")
    assert answer and answer.strip()


def test_react_agent_takes_grammar_valid_steps_and_reads_the_observations(tools):
    tool_list = list(tools.values())
    llm = AsymSpecLLM(verifier="bundled", drafter="bundled", max_new_tokens=96)  # a thought line, then the action
    agent = ReActAgent(tools=tool_list, llm=llm.for_react(tool_list, initial_tool_choice="search_python_docs"),
                       early_stopping_method="generate")  # the 135M model tends to repeat its action: cap the loop

    async def collect():
        handler = agent.run("What does the nonlocal statement do in Python?", max_iterations=2)
        return [event async for event in handler.stream_events()], await handler

    events, output = asyncio.run(collect())
    results = [e for e in events if isinstance(e, ToolCallResult)]
    steps = [e for e in events if isinstance(e, AgentOutput)]
    inputs = [e.input for e in events if isinstance(e, AgentInput)]
    assert results and results[0].tool_name == "search_python_docs" and set(results[0].tool_kwargs) == {"query"}
    assert str(results[0].tool_output.content).startswith("[")
    assert not any(step.retry_messages for step in steps)  # every step parsed: the grammar keeps the ReAct format
    for result in results:  # each observation is in a later step's input
        observation = f"Observation: {result.tool_output.content}"
        assert any(m.role == "user" and m.content == observation for step_input in inputs for m in step_input)
    for step in steps:
        assert step.raw["stats"]["new_tokens"] == step.raw["usage"]["completion_tokens"] > 0
    answer = output.response.content
    print(f"\nactions: {[(r.tool_name, r.tool_kwargs) for r in results]}\nfinal: {answer!r}")
    assert answer and answer.strip()


@pytest.fixture(scope="module")
def retrieval_example():
    return load_example("retrieval_qa")


@pytest.fixture(scope="module")
def index(retrieval_example):
    return retrieval_example.build_index()


def test_query_engine_over_a_vector_index_of_the_python_reference(llm, index):
    engine = AsymSpecQueryEngine.from_index(index, llm=llm, similarity_top_k=2)
    question = "In a for loop, what happens to the else clause when the loop is ended by break?"
    response = engine.query(question)
    assert len(response.source_nodes) == 2
    meta = response.metadata
    passages = meta["compression"]["by_kind"]["passage"]
    assert passages["items"] == 2 and passages["compressed"] >= 1 and passages["tokens_after"] < passages["tokens_before"]
    assert meta["full_prompt_tokens"] - meta["prompt_tokens"] == passages["tokens_before"] - passages["tokens_after"]
    views = engine.views(question, response.source_nodes)
    flat = lambda text: " ".join(text.split())  # noqa: E731
    assert all(flat(n.node.get_content()) in flat(views.full_text) for n in response.source_nodes)  # drafter: whole
    assert "terminates the loop without executing" in flat(views.full_text)  # the retriever found the answer
    assert response.response.strip() and meta["asymspec_stats"]["new_tokens"] == meta["completion_tokens"]
    print(f"\nsources: {[n.node.metadata['title'] for n in response.source_nodes]}, answer: {response.response!r}, "
          f"answer kept in compressed view: {'terminates the loop without executing' in flat(views.comp_text)}")


def test_retrieval_example_runs_in_under_three_minutes(retrieval_example, index, capsys):
    started = time.perf_counter()
    retrieval_example.main(index=index)  # the index was built by the fixture (~20 s, counted in the report)
    out = capsys.readouterr().out
    assert time.perf_counter() - started < 150
    assert out.count("\nQ: ") == len(retrieval_example.QUESTIONS) and out.count("  source: reference: ") >= 3
    assert out.count("compressed (verifier)") == len(retrieval_example.QUESTIONS) and "in full view True" in out
    for question, _, answer in retrieval_example.QUESTIONS:  # each answer is right: it states the word asked for
        assert answer in answer_to(out, question), out
    print(out)


def test_agent_example_runs_in_under_three_minutes(agent_example, capsys):
    started = time.perf_counter()
    asyncio.run(agent_example.main(max_new_tokens=64))
    out = capsys.readouterr().out
    assert time.perf_counter() - started < 180
    expressions = re.findall(r"tool calculator\(\{'expression': '([^']*)'\}\)", out)
    assert expressions and all(re.fullmatch(agent_example.EXPRESSION, e) for e in expressions)  # grammar: the pattern
    assert "tool search_python_docs({'query': " in out and out.count("acceptance") >= 2
    for question, answer in agent_example.QUESTIONS:  # each answer is right ("629", "AssertionError")
        assert answer in answer_to(out, question), out
    print(out)


def answer_to(out: str, question: str) -> str:
    """The "A: ..." line an example printed for `question`."""
    block = out.split(f"Q: {question}\n", 1)[1]
    return next(line for line in block.splitlines() if line.startswith("A: "))


def test_the_heterogeneous_pair_completes_through_the_bridge():
    llm = AsymSpecLLM(verifier="bundled-hetero", max_new_tokens=24)
    response = llm.complete("Name one planet of the solar system.")
    assert response.text.strip() and "User:" not in response.text
    assert response.additional_kwargs["asymspec_stats"]["drafted"] > 0


NOTES = ["the tomatoes were planted in April along the south fence and the watering can is in the blue shed",
         "the tyres were changed in October and the spare key hangs on the hook by the door",
         "the kettle descaler is under the sink and the oven timer runs five minutes fast",
         "the bicycle chain was oiled last week and the lock code is on the back of the calendar"]


def test_function_agent_with_a_token_limited_memory_the_drafter_reads_the_whole_history(llm):
    """`Memory(token_limit=...)` archives old turns; `with_full_history(memory)` hands the drafter all of them
    while the verifier reads what the memory returns (measured per step from the usage counts)."""
    from llama_index.core.memory import Memory

    memory = Memory.from_defaults(session_id="notes", token_limit=160, chat_history_token_ratio=0.7,
                                  token_flush_size=40)
    agent = FunctionAgent(tools=[], llm=llm.with_full_history(memory), system_prompt="You keep notes.")

    async def talk():
        usages = []
        for note in NOTES:
            handler = agent.run(f"Remember this note: {note}. " * 2, memory=memory)
            steps = [e async for e in handler.stream_events() if isinstance(e, AgentOutput)]
            await handler
            usages.append(steps[-1].raw["usage"])
        return usages

    usages = asyncio.run(talk())
    archived = [m for m in memory.get_all() if m not in memory.get()]
    assert archived  # the memory dropped old turns from what it returns ...
    last = usages[-1]
    assert last["full_prompt_tokens"] > last["prompt_tokens"]  # ... and the drafter still read them
    every = llm.chat_core.context.render_pair(
        [{"role": "system", "content": "You keep notes."}] + [{"role": m.role.value, "content": m.content}
                                                               for m in memory.get_all()[:-1]],
        [{"role": "user", "content": "x"}])
    assert last["full_prompt_tokens"] == len(every.full_ids)  # exactly the whole history before the last reply
    for before, after in zip(usages, usages[1:]):
        assert after["full_prompt_tokens"] > before["full_prompt_tokens"]
