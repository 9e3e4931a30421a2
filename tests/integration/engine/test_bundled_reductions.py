"""DESIGN §3 reductions on the real bundled model (SmolLM2-135M-Instruct) over real text."""

from pydoc_data.topics import topics

import pytest

from asymspec_agents import AsymSpecEngine, DecisionPolicy, GenerationConfig
from asymspec_agents.models import tiny_random_model

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
    fused = run(same_engine, views, mode="asymmetric", beta=0.0, cda=False, gamma=1.0)
    assert fused.token_ids == floor.token_ids
    assert fused.stats.drafted > 0


def test_identical_drafter_beta_one_equals_full_greedy_with_full_acceptance(same_engine, views):
    ceiling = run(same_engine, views, mode="full")
    fused = run(same_engine, views, mode="asymmetric", beta=1.0, cda=True)
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
    assert reused.stats.streams["S_full"].reused_tokens == len(full) + len(first.token_ids) - 1


def test_decision_points_land_at_slot_zero_without_changing_the_output(same_engine, views):
    policy = DecisionPolicy(triggers=(r"[,.]\s*$", r"\bthe\s*$"))
    plain = run(same_engine, views, mode="asymmetric", decisions=None)
    scheduled = run(same_engine, views, mode="asymmetric", decisions=policy)
    assert scheduled.token_ids == plain.token_ids
    stats = scheduled.stats
    assert stats.decision_points >= 2
    assert all(stats.token_slots[i] == 0 for i in stats.decision_positions)


def test_sampling_is_seeded(same_engine, views):
    config = dict(mode="asymmetric", temperature=0.8, top_p=0.9)
    first = run(same_engine, views, seed=7, **config)
    assert run(same_engine, views, seed=7, **config).token_ids == first.token_ids
