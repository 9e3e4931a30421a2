"""docs/design.md §5 reductions on the real bundled model (SmolLM2-135M-Instruct) over real text, and the engine
against the cache-free reference decoder with a drafter cut from the model's first layers."""

from pydoc_data.topics import topics

import pytest

import reference_decoder
from asymspec_agents import AsymSpecEngine, DecisionPolicy, GenerationConfig
from asymspec_agents.models import layer_subset
from asymspec_agents.testing import tiny_random_model

pytestmark = pytest.mark.integration
N = 32


def chat(tokenizer, passage: str, question: str) -> list[int]:
    messages = [{"role": "system", "content": "Answer from the document."},
                {"role": "user", "content": f"Document:\n{passage}\n\nQuestion: {question}"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def views(bundled):
    _, tokenizer = bundled
    passage = topics["assert"]
    question = "What does the assert statement do when debugging is off?"
    return chat(tokenizer, passage, question), chat(tokenizer, passage[-300:], question)


@pytest.fixture(scope="module")
def same_engine(bundled):
    model, tokenizer = bundled
    return AsymSpecEngine(model, model, tokenizer)


@pytest.fixture(scope="module")
def random_engine(bundled):
    model, tokenizer = bundled
    return AsymSpecEngine(model, tiny_random_model(len(tokenizer), seed=1), tokenizer)


def run(engine, views, **settings):
    return engine.generate(*views, GenerationConfig(max_new_tokens=N, **settings))


def test_beta_zero_gate_off_equals_compressed_greedy(same_engine, views):
    floor = run(same_engine, views, mode="compressed")
    fused = run(same_engine, views, mode="asymmetric", beta=0.0, cda=False, acceptance="fused", gamma=1.0)
    assert fused.token_ids == floor.token_ids
    assert fused.stats.drafted > 0


@pytest.mark.parametrize("rule", [dict(acceptance="fused"), dict(acceptance="ratio", fuse_bonus=True)])
def test_identical_drafter_beta_one_equals_full_greedy_with_full_acceptance(same_engine, views, rule):
    """The drafter is the verifier's own weights and nothing else: its copy head off (with it, it is another model)."""
    ceiling = run(same_engine, views, mode="full")
    fused = run(same_engine, views, mode="asymmetric", beta=1.0, cda=True, copy_weight=0.0, **rule)
    assert fused.token_ids == ceiling.token_ids
    assert fused.stats.acceptance_rate == 1.0
    # and the views really differ: the floor says something else
    assert run(same_engine, views, mode="compressed").token_ids != ceiling.token_ids


@pytest.mark.parametrize("mode, reference", [("symmetric", "compressed"), ("symmetric_full", "full")])
def test_symmetric_modes_are_lossless_with_same_and_random_drafters(same_engine, random_engine, views, mode, reference):
    reference_ids = run(same_engine, views, mode=reference).token_ids
    same = run(same_engine, views, mode=mode)
    assert same.token_ids == reference_ids and same.stats.acceptance_rate == 1.0
    random = run(random_engine, views, mode=mode)
    assert random.token_ids == reference_ids and random.stats.acceptance_rate < 0.1


def test_next_turn_served_from_reused_caches_equals_a_fresh_engine(bundled, views):
    model, tokenizer = bundled
    engine = AsymSpecEngine(model, model, tokenizer)
    full, comp = views
    first = engine.generate(full, comp, mode="asymmetric", max_new_tokens=N)
    turn = tokenizer("<|im_end|>\n<|im_start|>user\nSay it in five words.<|im_end|>\n<|im_start|>assistant\n",
                     add_special_tokens=False)["input_ids"]
    second_views = (full + first.token_ids + turn, comp + first.token_ids + turn)
    reused = engine.generate(*second_views, mode="asymmetric", max_new_tokens=N)
    fresh = AsymSpecEngine(model, model, tokenizer).generate(*second_views, mode="asymmetric", max_new_tokens=N)
    assert reused.token_ids == fresh.token_ids
    assert reused.stats.streams["V_comp"].prefill_tokens == len(turn)
    # all but the newest tokens: after an unfused bonus the drafter has not read the block's last draft either
    assert reused.stats.streams["S_full"].reused_tokens >= len(full) + len(first.token_ids) - 2


def test_decision_points_land_at_slot_zero_without_changing_the_output(same_engine, views):
    policy = DecisionPolicy(triggers=(r"[,.]\s*$", r"\bthe\s*$"))
    plain = run(same_engine, views, mode="asymmetric", acceptance="fused", decisions=None)
    scheduled = run(same_engine, views, mode="asymmetric", acceptance="fused", decisions=policy)
    assert scheduled.token_ids == plain.token_ids
    stats = scheduled.stats
    assert stats.decision_points >= 2
    assert all(stats.token_slots[i] == 0 for i in stats.decision_positions)


def test_sampling_is_seeded(same_engine, views):
    config = dict(mode="asymmetric", temperature=0.8, top_p=0.9)
    first = run(same_engine, views, seed=7, **config)
    assert run(same_engine, views, seed=7, **config).token_ids == first.token_ids


@pytest.fixture(scope="module")
def cut_engine(bundled):
    """The bundled model verifying for a drafter of its own first 12 layers, untrained: nearly every draft is
    rejected (the identical pair below covers fully accepted blocks and their bonus)."""
    model, tokenizer = bundled
    return AsymSpecEngine(model, layer_subset(model, range(12)), tokenizer)


@pytest.mark.parametrize("settings", [dict(acceptance="ratio"), dict(acceptance="ratio", k_max=4, cda=False),
                                      dict(acceptance="ratio", fuse_bonus=True), dict(acceptance="fused", k_max=2),
                                      dict(acceptance="fused", k_max=4, cda=False, gamma=0.8)],
                         ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()))
def test_engine_equals_the_reference_decoder_with_a_cut_down_drafter(cut_engine, views, settings):
    config = GenerationConfig(mode="asymmetric", max_new_tokens=16, adaptive_k=False, decisions=None, **settings)
    result = cut_engine.generate(*views, config)
    c = config.resolved()
    expected = reference_decoder.decode(cut_engine.verifier, cut_engine.drafter, *views, acceptance=c.acceptance,
                                        max_new_tokens=16, eos_ids=cut_engine.eos_token_ids, beta=c.beta,
                                        gamma=c.gamma, k_max=c.k_max, cda=c.cda, fuse_bonus=c.fuse_bonus,
                                        copy_weight=c.copy_weight)
    assert result.token_ids == expected
    assert result.stats.accepted < result.stats.drafted


def test_the_papers_unfused_bonus_with_an_identical_pair_is_not_the_ceiling(same_engine, views):
    """Every (K+1)-th token is the verifier's own choice on the compressed view, so the published rule does not
    reduce to the Ceiling; it equals the reference decoder."""
    model = same_engine.verifier
    paper = run(same_engine, views, mode="asymmetric", decisions=None, preset="paper")
    expected = reference_decoder.decode(model, model, *views, acceptance="ratio", max_new_tokens=N,
                                        eos_ids=same_engine.eos_token_ids)
    assert paper.token_ids == expected
    assert paper.token_ids != run(same_engine, views, mode="full").token_ids
