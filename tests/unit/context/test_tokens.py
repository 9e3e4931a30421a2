import importlib
import os
import sys
import time

import tiktoken

from asymspec_agents.context import tokens as tokens_module
from asymspec_agents.context.tokens import TokenCounter


def test_token_counter_encodes_without_special_tokens_and_caches(tok):
    counter = TokenCounter(tok)
    assert counter.encode("ab") == tok.encode("ab", add_special_tokens=False)
    counter.encode("ab")
    assert counter._cache.hits == 1 and counter.decode(counter.encode("héllo")) == "héllo"


def test_llama_index_copy_of_the_encoding_is_used_when_no_cache_dir_is_set(tmp_path, monkeypatch):
    folder = tmp_path / "llama_index" / "core" / "_static" / "tiktoken_cache"
    folder.mkdir(parents=True)
    (tmp_path / "llama_index" / "core" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    for name in [m for m in sys.modules if m == "llama_index" or m.startswith("llama_index.")]:
        monkeypatch.delitem(sys.modules, name)
    importlib.invalidate_caches()
    with tokens_module._tiktoken_cache_of_llama_index():
        assert os.environ["TIKTOKEN_CACHE_DIR"] == str(folder)
    assert "TIKTOKEN_CACHE_DIR" not in os.environ  # the process environment is restored after loading


def test_a_set_cache_dir_is_left_alone(monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "/somewhere/else")
    with tokens_module._tiktoken_cache_of_llama_index():
        assert os.environ["TIKTOKEN_CACHE_DIR"] == "/somewhere/else"
    assert os.environ["TIKTOKEN_CACHE_DIR"] == "/somewhere/else"


def test_a_hanging_download_gives_up_with_a_reason(monkeypatch):
    monkeypatch.setattr(tokens_module, "DOWNLOAD_TIMEOUT_S", 0.1)
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: time.sleep(2))
    encoding, note = tokens_module.cl100k_encoding.__wrapped__()
    assert encoding is None and "no answer in 0 s" in note and "cl100k counts are None" in note


def test_a_failing_load_reports_the_error_type(monkeypatch):
    def fail(name):
        raise ConnectionError("offline")

    monkeypatch.setattr(tiktoken, "get_encoding", fail)
    encoding, note = tokens_module.cl100k_encoding.__wrapped__()
    assert encoding is None and "(ConnectionError)" in note
