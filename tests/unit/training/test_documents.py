"""Long-document distillation data (training/distill/documents.py): what it plants, what the teacher reads, and that
no benchmark text is in it."""

import re

import pytest

from asymspec_agents.bench import niah
from asymspec_agents.bench.common import pydoc_text
from asymspec_agents.testing import byte_tokenizer
from asymspec_agents.training.distill.documents import (FACT_KINDS, SOURCES, Corpus, _fact, build_document_examples,
                                                        corpus)


@pytest.fixture(scope="module")
def texts():
    return corpus(byte_tokenizer(), written=["A paragraph the verifier wrote about keeping bees, long enough to be a "
                                             "block of a document that an agent reads."] * 3)


@pytest.fixture(scope="module")
def examples(texts):
    return build_document_examples(120, seed=4, tokenizer=byte_tokenizer(), texts=texts[0], min_tokens=400,
                                   max_tokens=3000)


def _document(messages):
    """The long document of a conversation: its passage, or its tool output."""
    return next(m.passages[0].text if m.role == "user" else m.content for m in messages
                if m.role == "tool" or (m.role == "user" and m.passages))


def test_examples_are_deterministic_in_the_seed(texts, examples):
    again = build_document_examples(120, seed=4, tokenizer=byte_tokenizer(), texts=texts[0], min_tokens=400,
                                    max_tokens=3000)
    assert [_document(e.messages) for e in again] == [_document(e.messages) for e in examples]
    other = build_document_examples(5, seed=5, tokenizer=byte_tokenizer(), texts=texts[0])
    assert [_document(e.messages) for e in other] != [_document(e.messages) for e in examples[:5]]


def test_every_kind_and_container_occurs_and_lengths_spread(examples):
    assert {e.kind for e in examples} == {"doc_fact", "doc_section", "doc_absent"}
    assert {bool(e.tools) for e in examples} == {True, False}  # passages and tool outputs
    lengths = [len(_document(e.messages).encode()) for e in examples]  # bytes are tokens here
    assert min(lengths) < 900 and max(lengths) > 2500


def test_the_asked_fact_is_in_the_document_and_in_the_teachers_excerpt(examples):
    for e in examples:
        document, excerpt = _document(e.messages), _document(e.teacher_messages)
        assert excerpt in document or all(block in document for block in excerpt.split("\n\n"))
        if e.kind == "doc_absent":
            assert e.answer is None
        else:
            assert e.answer in excerpt and e.answer in document
        # the student and the teacher are asked the same thing
        assert [m.content for m in e.messages if m.role == "user"] == \
            [m.content for m in e.teacher_messages if m.role == "user"]


def test_the_teacher_reads_a_short_excerpt_whatever_the_documents_length(examples):
    documents = [len(_document(e.messages)) for e in examples]
    excerpts = [len(_document(e.teacher_messages)) for e in examples]
    assert sum(excerpts) < 0.6 * sum(documents)


def test_facts_of_every_kind_are_asked_in_other_words_too():
    import random

    rng = random.Random(0)
    for kind in FACT_KINDS:
        fact = _fact(rng, kind)
        assert fact.answer in fact.sentence and len(set(fact.questions)) == 3
        assert fact.answer not in " ".join(fact.questions)  # asking never gives the answer away


def test_no_benchmark_text_is_in_the_training_texts(texts, examples):
    """Paul Graham's essays (asymspec bench niah), its needles, and pydoc_data.topics (the other benchmarks'
    haystacks) never reach distillation: no 12-word run of theirs is in the corpus or in a built document."""
    built, summary = texts
    assert set(summary["sources"]) == set(SOURCES)

    def shingles(text, n=12):
        words = re.findall(r"\w+", text.lower())
        return {" ".join(words[i:i + n]) for i in range(0, max(0, len(words) - n + 1))}

    banned = shingles(niah.essays()) | shingles(pydoc_text())
    ours = [p for paragraphs in built.prose.values() for p in paragraphs] + list(built.code)
    overlap = [p for p in ours if shingles(p) & banned]
    assert not overlap, overlap[:2]
    everything = " ".join(_document(e.messages) + " " + " ".join(m.content for m in e.messages if m.content) for e in examples)
    for needle in niah.NEEDLES:  # (single numbers may coincide: a random code of four digits is not their text)
        assert needle.text not in everything and needle.question not in everything
        assert not any(" " in fact or "-" in fact for fact in needle.facts if fact.lower() in everything.lower())


def test_the_corpus_draws_blocks_of_about_the_asked_length():
    import random

    corpus_ = Corpus(byte_tokenizer(), {"prose": ["x" * 100, "y" * 300]}, ["def f():\n    return 1"])
    blocks = corpus_.blocks(random.Random(0), 2000, tool_output=False)
    assert 2000 <= sum(len(b) + 2 for b in blocks) < 2400
    tool = corpus_.blocks(random.Random(0), 2000, tool_output=True)
    assert sum(len(b) + 2 for b in tool) >= 2000
