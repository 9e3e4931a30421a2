"""Drafter and verifier with different tokenizers: the vocabulary bridge and the bridged reductions of docs/design.md §5."""

from collections import Counter

import pytest
import torch
from sampling_reference import total_variation, two_token_distribution

from asymspec_agents import AsymSpecEngine, GenerationConfig, VocabularyMismatchError
from asymspec_agents.engine.bridge import DraftTranscript, VocabularyBridge, token_bytes
from asymspec_agents.testing import byte_tokenizer, tiny_random_model

TEXT = "the theme of the thesis: then the other three thrushes thrive there. " * 3
# The drafter knows merges the verifier lacks and vice versa: both sides hold tokens outside the intersection.
VERIFIER_MERGES = ["th", " th", "er", " the"]
DRAFTER_MERGES = ["he", "re", " t", "hr", "es"]


@pytest.fixture(scope="module")
def tokenizers():
    return byte_tokenizer(VERIFIER_MERGES), byte_tokenizer(DRAFTER_MERGES)


@pytest.fixture(scope="module")
def hetero(tokenizers):
    v_tok, d_tok = tokenizers
    verifier = tiny_random_model(len(v_tok), seed=0)
    drafter = tiny_random_model(len(d_tok), seed=7, layers=1)
    return verifier, drafter, v_tok, d_tok


def make_engine(hetero):
    verifier, drafter, v_tok, d_tok = hetero
    return AsymSpecEngine(verifier, drafter, v_tok, drafter_tokenizer=d_tok)


@pytest.fixture(scope="module")
def views(tokenizers):
    full = tokenizers[0](TEXT)["input_ids"]
    return full, full[-25:]


# -- the bridge itself ---------------------------------------------------------------------------------------


def test_intersection_is_the_tokens_with_equal_bytes(tokenizers):
    v_tok, d_tok = tokenizers
    bridge = VocabularyBridge(v_tok, d_tok, verifier_vocab=len(v_tok), drafter_vocab=len(d_tok),
                              verifier_eos={v_tok.eos_token_id}, drafter_eos={d_tok.eos_token_id})
    assert bridge.shared_text_tokens == 256  # every byte; no merge is common to both
    d_vocab, v_vocab = d_tok.get_vocab(), v_tok.get_vocab()
    assert bridge.to_verifier[d_vocab["a"]] == v_vocab["a"]
    assert bridge.to_verifier[d_vocab["he"]] == -1 and not bridge.drafter_mask[d_vocab["he"]]
    assert bridge.to_drafter[v_vocab["th"]] == -1
    assert bridge.to_verifier[d_tok.eos_token_id] == v_tok.eos_token_id  # end of sequence maps across
    assert "259 vs 263 tokens" in bridge.describe() or "264 vs 263" in bridge.describe()


def test_lift_puts_drafter_rows_on_the_verifier_intersection_and_zero_elsewhere(tokenizers):
    v_tok, d_tok = tokenizers
    bridge = VocabularyBridge(v_tok, d_tok, verifier_vocab=len(v_tok), drafter_vocab=len(d_tok),
                              verifier_eos=set(), drafter_eos=set())
    rows = torch.randn(3, len(d_tok))
    lifted = bridge.lift(rows)
    assert lifted.shape == (3, len(v_tok))
    d, v = d_tok.get_vocab()["q"], v_tok.get_vocab()["q"]
    assert torch.equal(lifted[:, v], rows[:, d])
    assert torch.all(lifted[:, v_tok.get_vocab()["th"]] == 0)


def test_sentencepiece_space_marker_and_byte_fallback_tokens_become_raw_bytes():
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<0x41>": 1, "<0xC3>": 2, "A": 3, "\u2581hello": 4, "\u2581": 5, "h": 6}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    core.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>")
    table = token_bytes(tok, len(tok))
    assert table[4] == b" hello" and table[1] == b"A" and table[2] == b"\xc3" and table[0] == b""
    gpt2_like = byte_tokenizer([" h"])
    bridge = VocabularyBridge(gpt2_like, tok, verifier_vocab=len(gpt2_like), drafter_vocab=len(tok),
                              verifier_eos=set(), drafter_eos=set())
    assert bridge.to_drafter[gpt2_like.get_vocab()["A"]] == 3  # the ordinary piece, not <0x41>
    assert bridge.to_verifier[1] == -1  # <0x41> duplicates 'A': only one of them is proposed
    assert bridge.to_drafter[gpt2_like.get_vocab()["\u00c3"]] == 2  # byte 0xC3 exists only as a fallback token


def test_transcript_respells_verifier_tokens_outside_the_intersection(tokenizers):
    v_tok, d_tok = tokenizers
    bridge = VocabularyBridge(v_tok, d_tok, verifier_vocab=len(v_tok), drafter_vocab=len(d_tok),
                              verifier_eos=set(), drafter_eos=set())
    transcript = DraftTranscript(bridge)
    committed = v_tok("then there the", add_special_tokens=False)["input_ids"]
    for token in committed:  # one token at a time, as blocks commit them
        transcript.extend([token])
    assert d_tok.decode(transcript.tokens) == "then there the"
    assert transcript.resyncs > 0


def test_a_pair_sharing_almost_nothing_is_refused(hetero):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    verifier, drafter, v_tok, _ = hetero
    words = {w: i for i, w in enumerate(["<unk>"] + [f"word{i}" for i in range(300)])}
    unrelated = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(words, unk_token="<unk>")),
                                        unk_token="<unk>")
    with pytest.raises(VocabularyMismatchError, match="share only 0 of the drafter's 300 text tokens"):
        AsymSpecEngine(verifier, tiny_random_model(len(unrelated)), v_tok, drafter_tokenizer=unrelated)


def test_bridging_can_be_refused_with_the_old_error(hetero):
    verifier, drafter, v_tok, d_tok = hetero
    with pytest.raises(VocabularyMismatchError, match="vocabularies differ"):
        AsymSpecEngine(verifier, drafter, v_tok, drafter_tokenizer=d_tok, bridge_vocabularies=False)


# -- bridged reductions (docs/design.md §5) --------------------------------------------------------------------------


@pytest.mark.parametrize("k_max", [1, 4, 8])
def test_beta_zero_gate_off_greedy_equals_the_verifier_alone(hetero, views, k_max):
    full, comp = views
    engine = make_engine(hetero)
    reference = engine.generate(full, comp, mode="compressed", max_new_tokens=40).token_ids
    result = engine.generate(full, comp, mode="asymmetric", beta=0.0, cda=False, acceptance="fused", max_new_tokens=40, k_max=k_max)
    assert result.token_ids == reference
    assert result.stats.drafted > 0


def test_symmetric_modes_equal_the_verifier_alone_across_the_bridge(hetero, views):
    full, comp = views
    engine = make_engine(hetero)
    for mode, reference in (("symmetric", "compressed"), ("symmetric_full", "full")):
        assert (engine.generate(full, comp, mode=mode, max_new_tokens=40).token_ids
                == engine.generate(full, comp, mode=reference, max_new_tokens=40).token_ids)


def test_swapped_roles_resync_and_stay_exact():
    """A byte-only drafter: every merge the verifier commits is outside the intersection (the drafter re-encodes)."""
    d_tok, v_tok = byte_tokenizer(), byte_tokenizer(VERIFIER_MERGES + ["he", "he "])
    verifier = tiny_random_model(len(v_tok), seed=3)
    ids = v_tok(TEXT)["input_ids"]
    # a random verifier seldom picks the 6 merges among 265 tokens: give them the output rows of its favourites
    favourites = Counter(AsymSpecEngine(verifier, tokenizer=v_tok).generate(ids, mode="full", max_new_tokens=60).token_ids)
    merges = [v_tok.get_vocab()[t] for t in v_tok.get_vocab() if len(t) > 1 and not t.startswith("<|")]
    with torch.no_grad():
        for merge, (favourite, _) in zip(merges, favourites.most_common(len(merges))):
            head = verifier.lm_head.weight
            head[[merge, favourite]] = head[[favourite, merge]]
    engine = AsymSpecEngine(verifier, tiny_random_model(len(d_tok), seed=4), v_tok, drafter_tokenizer=d_tok)
    resyncs = 0
    for start in range(0, 40, 10):
        full, comp = ids[start:], ids[-20:]
        result = engine.generate(full, comp, mode="asymmetric", beta=0.0, cda=False, acceptance="fused", max_new_tokens=60)
        assert result.token_ids == engine.generate(full, comp, mode="compressed", max_new_tokens=60).token_ids
        resyncs += result.stats.bridge_resyncs
    assert resyncs > 0


def test_beta_changes_the_output_and_the_stats_show_the_bridge(hetero, views):
    full, comp = views
    engine = make_engine(hetero)
    plain = engine.generate(full, comp, mode="compressed", max_new_tokens=40)
    fused = engine.generate(full, comp, mode="asymmetric", beta=2.0, max_new_tokens=40)
    assert fused.token_ids != plain.token_ids
    assert fused.stats.fused_positions > 0 and fused.stats.delta_abs_mean > 0
    assert {"S_full", "S_comp", "V_comp"} <= set(fused.stats.streams)


def test_a_second_call_reuses_the_drafter_caches_and_equals_a_fresh_engine(hetero, views):
    full, comp = views
    engine = make_engine(hetero)
    config = GenerationConfig(mode="asymmetric", beta=1.0, max_new_tokens=24)
    first = engine.generate(full, comp, config)
    full2, comp2 = full + first.token_ids + full[:12], comp + first.token_ids + full[:12]
    second = engine.generate(full2, comp2, config)
    assert second.token_ids == make_engine(hetero).generate(full2, comp2, config).token_ids
    drafter_full = second.stats.streams["S_full"]
    assert drafter_full.reused_tokens > len(full) - 5  # only the boundary of the re-encoded text is read again
    assert drafter_full.prefill_tokens < 24 + 12 + 5


class OnlyLetters:
    """A hand-made TokenConstraint: lowercase letters and spaces only (masks drafts and targets alike)."""

    def __init__(self, tokenizer):
        table = token_bytes(tokenizer, len(tokenizer))
        self.mask = torch.tensor([bool(b) and all(c in b"abcdefghijklmnopqrstuvwxyz " for c in b) for b in table])

    def allowed(self):
        return self.mask

    def accept(self, token):
        assert self.mask[token]

    def rollback(self, count):
        pass


def test_constraints_mask_the_bridged_drafter_and_the_verifier_alike(hetero, views):
    full, comp = views
    engine = make_engine(hetero)
    v_tok = hetero[2]
    reference = engine.generate(full, comp, mode="compressed", max_new_tokens=30, constraint=OnlyLetters(v_tok))
    result = engine.generate(full, comp, mode="asymmetric", beta=0.0, cda=False, acceptance="fused", max_new_tokens=30,
                             constraint=OnlyLetters(v_tok))
    assert result.token_ids == reference.token_ids
    assert all(c in "abcdefghijklmnopqrstuvwxyz " for c in result.text)


# -- sampling: the verifier's distribution, exactly ------------------------------------------------------------

TOP_K = 3


def test_sampled_bridged_asymmetric_with_beta_zero_reproduces_the_verifier_distribution():
    """Tiny vocabularies that overlap in part: 'cd' only the verifier has, 'bc'/'da' only the drafter."""
    v_tok = byte_tokenizer(["ab", "cd", " a"], alphabet="abcd ")
    d_tok = byte_tokenizer(["ab", "bc", "da", " a"], alphabet="abcd ")
    verifier = tiny_random_model(len(v_tok), seed=11, logit_std=1.5)
    drafter = tiny_random_model(len(d_tok), seed=12, logit_std=1.5)
    engine = AsymSpecEngine(verifier, drafter, v_tok, drafter_tokenizer=d_tok)
    full = v_tok("abcd dab cab a bcd " * 4)["input_ids"]
    comp = full[-10:]
    probs = two_token_distribution(verifier, comp, TOP_K)
    config = dict(mode="asymmetric", beta=0.0, cda=False, acceptance="fused", temperature=1.0, top_k=TOP_K, max_new_tokens=2,
                  k_max=2, adaptive_k=False, decisions=None)
    runs = [engine.generate(full, comp, GenerationConfig(seed=seed, **config)) for seed in range(3000)]
    samples = [tuple(r.token_ids) for r in runs]
    tv_small, tv_large = total_variation(samples[:300], probs), total_variation(samples, probs)
    assert tv_large < 0.04 and tv_large < tv_small
    assert sum(r.stats.accepted for r in runs) > 300  # drafts crossed the bridge and were accepted
    assert sum(r.stats.bridge_resyncs for r in runs) > 30  # the verifier committed 'cd', outside the intersection
