import textwrap

import numpy as np
import pytest
from pydoc_data.topics import topics

from asymspec_agents.context import (AssistantMessage, CompressionPolicy, DualContext, Passage, SystemMessage, ToolCall,
                                     ToolResult, UserMessage, parse_tool_calls, tool_spec_from_callable)
from asymspec_agents.context.chat_format import RoleFormat

pytestmark = pytest.mark.integration

TOOLS = [tool_spec_from_callable(f) for f in (textwrap.shorten, textwrap.indent)]


def agent_steps(n_steps=10):
    """An agent reading Python's reference documentation, one tool call per step; yields the history at each step."""
    names = sorted(topics)
    history = [SystemMessage("You answer questions about Python. Café ☕ is open."), UserMessage("How do loops and exceptions work?")]
    for step in range(n_steps):
        call = ToolCall(f"call_{step}", "shorten", {"text": names[step], "width": 70})
        history = history + [AssistantMessage(f"Step {step}: reading “{names[step]}”.", tool_calls=[call]),
                             ToolResult(call.id, "shorten", topics[names[step]])]
        if step % 3 == 2:
            history = history + [UserMessage(f"Now focus on {names[step + 1]}.", passages=[Passage(topics[names[step + 1]][:3000], source="docs")])]
        yield history


def test_smollm2_template_uses_the_fast_format_with_a_tool_role(smol):
    _, tok = smol
    fmt = DualContext(tok).format
    assert isinstance(fmt, RoleFormat) and fmt.tool_role == "tool"


def test_segment_tokens_equal_the_tokens_of_the_whole_text(smol):
    _, tok = smol
    views = DualContext(tok).render(list(agent_steps())[-1], tools=TOOLS)
    assert views.full_ids == tok.encode(views.full_text, add_special_tokens=False)
    assert views.comp_ids == tok.encode(views.comp_text, add_special_tokens=False)
    assert views.full_text == tok.apply_chat_template(
        [{"role": r, "content": c} for r, c in _turns(views.full_text)], tokenize=False, add_generation_prompt=True)


def test_default_system_prompt_appears_only_without_a_system_turn(smol):
    _, tok = smol
    ctx = DualContext(tok)
    assert "named SmolLM" in ctx.render([UserMessage("hi")]).full_text
    assert "named SmolLM" not in ctx.render([SystemMessage("Be terse."), UserMessage("hi")]).full_text
    with_tools = ctx.render([UserMessage("hi")], tools=TOOLS).comp_text
    assert with_tools.startswith("<|im_start|>system\n# Tools") and "shorten(text: Any, width: Any" in with_tools


def test_a_growing_agent_conversation_only_appends_tokens(smol):
    _, tok = smol
    ctx = DualContext(tok)
    previous = None
    for history in agent_steps():
        views = ctx.render(history, tools=TOOLS, add_generation_prompt=False)
        if previous is not None:
            assert views.full_ids[: len(previous.full_ids)] == previous.full_ids
            assert views.comp_ids[: len(previous.comp_ids)] == previous.comp_ids
        previous = views
    assert previous.report.ratio < 0.5  # the reference pages are long: compression did run


def test_compressed_tool_results_fit_their_budget_in_smollm2_tokens(smol):
    _, tok = smol
    views = DualContext(tok, CompressionPolicy(budgets={"tool_result": 200, "passage": 100})).render(list(agent_steps())[-1])
    items = [i for i in views.report.items if i.kind in ("tool_result", "passage")]
    assert items and all(i.tokens_after <= i.budget for i in items)
    assert all(i.compressor == "bm25" for i in items if i.tokens_before > i.budget)


def test_rendered_tool_calls_parse_back(smol):
    _, tok = smol
    views = DualContext(tok).render(list(agent_steps(1))[-1])
    assistant = views.full_text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    [call] = parse_tool_calls(assistant).tool_calls
    assert call.name == "shorten" and call.arguments["width"] == 70


def test_surprisal_pruning_with_the_bundled_drafter_keeps_tokens_in_order_within_budget(smol):
    model, tok = smol
    ctx = DualContext(tok, CompressionPolicy(compressors={"tool_result": "surprisal"}, budgets={"tool_result": 120}), drafter=model)
    text = topics["for"][:2500]
    history = [UserMessage("Explain for loops."), AssistantMessage("", tool_calls=[ToolCall("c", "doc", {})]), ToolResult("c", "doc", text)]
    views = ctx.render(history)
    [item] = [i for i in views.report.items if i.kind == "tool_result"]
    assert item.compressor == "surprisal" and item.tokens_after <= 120
    kept = views.comp_text.split('<tool_response name="doc">\n')[1].split("\n</tool_response>")[0]
    # Byte-level tokens decode to their own bytes, so the kept tokens read as the source with pieces left out.
    assert _is_subsequence(kept, text) and len(kept) < len(text) / 2


def test_embedding_selection_with_minilm_keeps_the_semantically_matching_sentence(smol):
    _, tok = smol
    passage = " ".join([
        "Lists are mutable sequences, typically used to store collections of homogeneous items.",
        "The break statement terminates the nearest enclosing for or while loop.",
        "Dictionaries map hashable keys to arbitrary values.",
        "A string is an immutable sequence of Unicode code points.",
        "Modules are imported with the import statement and cached in sys.modules.",
        "Classes bundle data and functionality together.",
    ] * 2)
    policy = CompressionPolicy(compressors={"passage": "embedding"}, budgets={"passage": 24})
    views = DualContext(tok, policy).render([UserMessage("How can I leave a loop early?", passages=[Passage(passage)])])
    assert "The break statement terminates" in views.comp_text


def test_a_cached_twenty_message_step_runs_no_compressor_and_no_tokenizer(smol):
    _, tok = smol
    ctx = DualContext(tok)
    history = list(agent_steps(8))[-1]
    assert len(history) == 20
    first = ctx.render(history, tools=TOOLS)
    misses = (ctx.cache.misses, ctx.tokens._cache.misses)
    again = ctx.render(history, tools=TOOLS)
    assert (ctx.cache.misses, ctx.tokens._cache.misses) == misses and again.comp_ids == first.comp_ids


def _turns(text):
    body = text[: -len("<|im_start|>assistant\n")]
    for chunk in body.split("<|im_start|>")[1:]:
        role, content = chunk.split("\n", 1)
        yield role, content[: -len("<|im_end|>\n")]


def _is_subsequence(needle, haystack):
    it = iter(haystack)
    return all(token in it for token in needle)


def test_minilm_embeddings_come_back_in_input_order_and_unit_length():
    from asymspec_agents.context.embedders import MiniLMEmbedder

    texts = ["a", "a much longer sentence about loops and exceptions in Python", "mid length text", "x" * 300]
    embedder = MiniLMEmbedder(mode="transformer", batch_size=2)
    together = embedder(texts)
    one_by_one = np.concatenate([embedder([t]) for t in texts])
    assert together.shape == (4, 384)
    assert np.allclose(together, one_by_one, atol=1e-4) and np.allclose(np.linalg.norm(together, axis=1), 1, atol=1e-5)
