"""The decoding loop's three side concerns, each alone: decision scheduling, the trivial vocabulary bridge, and how
rows are read (whole here; truncated by a server: tests/unit/engine/test_remote_stream.py and tests/remote)."""

import torch

from asymspec_agents.engine.bridge import DraftTranscript, SameVocabulary
from asymspec_agents.engine.decisions import DecisionPolicy, DecisionSchedule
from asymspec_agents.engine.remote_stream import TruncatedRows, WholeRows, row_reader
from asymspec_agents.engine.streams import KVStream
from asymspec_agents.testing import byte_tokenizer, tiny_random_model

TOKENIZER = byte_tokenizer()
PEAKED, FLAT = torch.tensor([9.0, 0.0, 0.0, 0.0]), torch.zeros(4)  # entropy ~0.004 and log 4 = 1.39 nats


def ids(text: str) -> list[int]:
    return TOKENIZER(text, add_special_tokens=False)["input_ids"]


def test_without_a_policy_no_position_is_a_decision_point():
    schedule = DecisionSchedule(None, TOKENIZER, ids("Final Answer:"))
    assert not schedule.before([], None) and not schedule.uncertain(FLAT)
    assert not schedule.at_block_start(None, FLAT) and schedule.cut(torch.stack([FLAT] * 3), 2) is None


def test_text_triggers_read_the_committed_tail_and_the_drafts():
    schedule = DecisionSchedule(DecisionPolicy(triggers=(r"Answer:\s*$",)), TOKENIZER, ids("Think first. Final"))
    assert not schedule.before([], None)
    assert schedule.before(ids(" Answer:"), None)  # drafts that end in the trigger
    schedule.extend(ids(" Answer: "))  # committed: the next block's first position is the decision
    assert schedule.before([], None) and schedule.at_block_start(None, PEAKED)


def test_only_the_lookback_window_of_tokens_is_read():
    policy = DecisionPolicy(triggers=(r"^Answer:",), lookback_tokens=4)
    schedule = DecisionSchedule(policy, TOKENIZER, ids("Answer:"))
    assert not schedule.before([], None)  # "wer:" is what four byte tokens hold
    schedule = DecisionSchedule(DecisionPolicy(triggers=(r"^wer:",), lookback_tokens=4), TOKENIZER, ids("Answer:"))
    assert schedule.before([], None)


def test_a_tagged_next_position_starts_the_next_block_once():
    schedule = DecisionSchedule(DecisionPolicy(triggers=()), TOKENIZER, ids("x"))
    schedule.tag_next()
    assert schedule.at_block_start(None, PEAKED) and not schedule.at_block_start(None, PEAKED)


def test_uncertainty_tags_rows_and_cuts_a_block_at_its_first_uncertain_slot_after_the_first():
    schedule = DecisionSchedule(DecisionPolicy(triggers=(), entropy_threshold=1.0), TOKENIZER, ids("x"))
    assert schedule.uncertain(FLAT) and not schedule.uncertain(PEAKED)
    rows = torch.stack([FLAT, PEAKED, FLAT, FLAT])  # slot 0 is the verifier's own: never a cut
    assert schedule.cut(rows, 3) == 2 and schedule.cut(rows, 1) is None and schedule.cut(rows, 0) is None


def test_the_same_vocabulary_bridge_passes_ids_rows_and_masks_through():
    same = SameVocabulary()
    rows, allowed = torch.randn(2, 5), torch.tensor([True, False, True, True, False])
    assert same.lift(rows) is rows and same.drafter_allowed(allowed) is allowed and same.drafter_allowed(None) is None
    assert same.to_verifier[7] == 7 and same.to_drafter[3] == 3
    transcript = DraftTranscript(same)
    transcript.extend([5, 9, 2])
    transcript.extend([4])
    assert transcript.tokens == [5, 9, 2, 4] and transcript.resyncs == 0


def test_local_streams_read_whole_rows():
    model = tiny_random_model(len(TOKENIZER))
    verify, draft = (KVStream(model, role, view, len(TOKENIZER)) for role, view in (("verifier", "comp"),
                                                                                      ("drafter", "full")))
    reader = row_reader(verify, draft, None, beta=1.0, settles=True)
    assert isinstance(reader, WholeRows)
    row = torch.randn(1, 4)
    assert reader.read("full", row) is row
    t = torch.randn(2, 4)
    reader.settle(t, None, None, [0, 1], delta=None)  # nothing to settle, nothing asked
    assert isinstance(row_reader(verify, draft, draft, beta=1.0, settles=False), WholeRows)


def test_truncated_rows_settle_nothing_when_the_verifier_is_local():
    model = tiny_random_model(len(TOKENIZER))
    verify = KVStream(model, "verifier", "comp", len(TOKENIZER))
    rows = TruncatedRows({"target": verify, "full": None, "comp": None}, beta=1.0, settles=True)
    t, b = torch.randn(2, 4), torch.randn(2, 4)
    before = t.clone()
    rows.settle(t, b, None, [0, 1], delta=lambda *_: torch.zeros(2, 4))
    assert torch.equal(t, before) and rows.read("target", t) is t
