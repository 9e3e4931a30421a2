"""The bundled heterogeneous pair: SmolLM2-135M-Instruct drafting for Gemma-3-270M across the vocabulary bridge."""

from pydoc_data.topics import topics

import pytest

from asymspec_agents import AsymSpecEngine, GenerationConfig
from asymspec_agents.chat import AsymSpecChat
from asymspec_agents.context import SystemMessage, UserMessage

pytestmark = pytest.mark.integration
N = 20


@pytest.fixture(scope="module")
def engine():
    return AsymSpecEngine.shared("bundled-hetero")


@pytest.fixture(scope="module")
def views(engine):
    chat = AsymSpecChat(engine)
    messages = [SystemMessage("Answer from the document."),
                UserMessage(f"Document:\n{topics['assert']}\n\nQuestion: What does assert do when debugging is off?")]
    full = chat.context.render(messages).full_ids
    short = [SystemMessage("Answer from the document."),
             UserMessage(f"Document:\n{topics['assert'][-300:]}\n\nQuestion: What does assert do when debugging is off?")]
    return full, chat.context.render(short).full_ids


def test_the_pair_is_bridged_with_most_of_the_drafter_vocabulary(engine):
    bridge = engine.bridge
    assert bridge is not None and engine.vocab_size == 262144 and bridge.drafter_vocab == 49152
    assert bridge.shared_text_tokens > 0.9 * 49152  # nearly every SmolLM2 token spells a Gemma token
    assert "49152 vs 262144" in bridge.describe()


def test_beta_zero_gate_off_equals_gemma_alone_on_the_compressed_view(engine, views):
    full, comp = views
    reference = engine.generate(full, comp, mode="compressed", max_new_tokens=N)
    result = engine.generate(full, comp, mode="asymmetric", beta=0.0, cda=False, acceptance="fused", max_new_tokens=N)
    assert result.token_ids == reference.token_ids
    assert result.stats.accepted > 0  # the smaller drafter's proposals cross the bridge and are accepted


def test_symmetric_full_equals_gemma_on_the_full_view(engine, views):
    full, comp = views
    assert (engine.generate(full, comp, mode="symmetric_full", max_new_tokens=N).token_ids
            == engine.generate(full, comp, mode="full", max_new_tokens=N).token_ids)


def test_a_follow_up_turn_reuses_every_cache_and_equals_a_fresh_run(engine, views):
    full, comp = views
    config = GenerationConfig(mode="asymmetric", beta=1.0, max_new_tokens=N)
    first = engine.generate(full, comp, config)
    follow = engine.tokenizer("\n\nUser: And when it is on?\n\nAssistant:", add_special_tokens=False)["input_ids"]
    full2, comp2 = full + first.token_ids + follow, comp + first.token_ids + follow
    second = engine.generate(full2, comp2, config)
    streams = second.stats.streams
    assert streams["V_comp"].prefill_tokens < len(first.token_ids) + len(follow) + 2
    assert streams["S_full"].prefill_tokens < len(first.token_ids) + len(follow) + 8  # re-encoded boundary only
    engine.reset()
    assert engine.generate(full2, comp2, config).token_ids == second.token_ids


def test_chat_on_the_base_model_uses_the_plain_transcript_and_stops_at_the_next_turn(engine):
    chat = AsymSpecChat(engine)
    messages = [UserMessage("Name one planet of the solar system.")]
    views = chat.context.render(messages)
    assert views.comp_text.startswith("<bos>User: Name one planet") and views.comp_text.endswith("Assistant:")
    reply = chat.reply(messages, max_new_tokens=40)
    assert "User:" not in reply.text
    assert reply.usage.input_tokens == len(views.comp_ids)
