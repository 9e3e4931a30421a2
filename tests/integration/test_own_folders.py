"""Your own pair in folders: a tiny random pair saved as two model folders reads the same under ChatAsymSpec,
AsymSpecLLM and `asymspec serve` as the same models handed over in memory (docs/own-models.md)."""

import json
import urllib.request

import pytest

from asymspec_agents import AsymSpecEngine
from asymspec_agents.server.process import ServerProcess
from asymspec_agents.testing import tiny_random_pair

pytestmark = pytest.mark.integration
QUESTION = "Spell the word river backwards."
TOKENS = 12


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    pair = tiny_random_pair(seed=3, drafter_layers=1)
    root = tmp_path_factory.mktemp("own-pair")
    for name, model in (("verifier", pair.verifier), ("drafter", pair.drafter)):
        model.save_pretrained(root / name)
        pair.tokenizer.save_pretrained(root / name)
    return pair, str(root / "verifier"), str(root / "drafter")


def test_chat_asymspec_and_asymspec_llm_from_folders_equal_the_models_in_memory(folders):
    from langchain_asymspec import ChatAsymSpec
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.asymspec import AsymSpecLLM

    pair, verifier, drafter = folders
    memory = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    expected = ChatAsymSpec(engine=memory, max_tokens=TOKENS).invoke(QUESTION).content
    assert len(expected) >= 4  # random weights write bytes, not words: enough of them to tell two pairs apart
    assert ChatAsymSpec(verifier=verifier, drafter=drafter, max_tokens=TOKENS).invoke(QUESTION).content == expected
    message = [ChatMessage(role="user", content=QUESTION)]
    in_memory = AsymSpecLLM(engine=memory, max_new_tokens=TOKENS).chat(message).message.content
    assert AsymSpecLLM(verifier=verifier, drafter=drafter, max_new_tokens=TOKENS).chat(message).message.content \
        == in_memory == expected


def test_the_server_on_the_folders_answers_as_the_models_in_memory(folders):
    from langchain_asymspec import ChatAsymSpec

    pair, verifier, drafter = folders
    expected = ChatAsymSpec(engine=AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer),
                            max_tokens=TOKENS).invoke(QUESTION).content
    with ServerProcess(["--verifier", verifier, "--drafter", drafter, "--log-level", "warning"]) as server:
        body = json.dumps({"model": "asymspec", "max_tokens": TOKENS,
                           "messages": [{"role": "user", "content": QUESTION}]}).encode()
        request = urllib.request.Request(server.base_url + "/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            reply = json.load(response)
    assert reply["choices"][0]["message"]["content"] == expected
