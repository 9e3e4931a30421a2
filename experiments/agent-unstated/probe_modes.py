"""retrieval_qa.py's two questions with the default verifier per mode (the default drafter where it drafts).

Run from the repository root: OMP_NUM_THREADS=1 python experiments/agent-unstated/probe_modes.py [MODE ...]
"""
import sys
sys.path.insert(0, "examples")
import retrieval_qa as rq
from llama_index.llms.asymspec import AsymSpecLLM, AsymSpecQueryEngine
index = rq.build_index()
for mode in sys.argv[1:] or ["asymmetric", "full", "compressed"]:
    llm = AsymSpecLLM(max_new_tokens=64, mode=mode)
    engine = AsymSpecQueryEngine.from_index(index, llm=llm, similarity_top_k=2)
    for question, phrase, answer in rq.QUESTIONS:
        r = engine.query(question)
        print(mode, "|", question[:40], "|", answer in r.response, "|", r.response.strip()[:150], flush=True)
