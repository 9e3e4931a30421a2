"""The remote model's pieces that need no server: rows from returned log-probabilities, and a server that is down."""

import math

import pytest
import torch

from asymspec_agents.models.remote import RemoteModel, RemoteModelError, _entries, dense_row, is_url
from asymspec_agents.errors import ConfigError
from asymspec_agents.server.process import free_port


def test_a_row_is_exact_where_returned_and_spreads_the_leftover_mass_below_the_last_returned_value():
    entries = {3: math.log(0.5), 7: math.log(0.3), 1: math.log(0.1)}
    row = dense_row(entries, vocab_size=10)
    assert torch.allclose(row[[3, 7, 1]], torch.log(torch.tensor([0.5, 0.3, 0.1])))
    others = row[[0, 2, 4, 5, 6, 8, 9]]
    assert torch.allclose(others, torch.full_like(others, math.log(0.1 / 7)))
    assert torch.logsumexp(row, 0).item() == pytest.approx(0.0, abs=1e-6)  # still a distribution
    assert int(row.argmax()) == 3


def test_the_spread_never_exceeds_the_smallest_returned_value():
    row = dense_row({0: math.log(0.6), 1: math.log(0.01)}, vocab_size=4)  # 0.39 left for two tokens
    assert torch.allclose(row[2:], torch.full((2,), math.log(0.01)))


def test_vllm_rows_are_read_with_token_id_keys():
    assert _entries({"token_id:42": {"logprob": -0.5, "rank": 1}, "7": {"logprob": -2.0}}) == {42: -0.5, 7: -2.0}
    assert _entries({"token_id:5": -0.25}) == {5: -0.25}


def test_urls_name_servers():
    assert is_url("http://127.0.0.1:8000/v1") and is_url("https://models.example/v1")
    assert not is_url("bundled") and not is_url(None)


def test_a_server_that_is_down_is_a_clear_error(pair):
    with pytest.raises(RemoteModelError, match="did not answer GET /models after 2 tries .*make vllm-start"):
        RemoteModel(f"http://127.0.0.1:{free_port()}/v1", pair.tokenizer, retries=1, backoff=0.01, timeout=2)
    with pytest.raises(ConfigError, match="http"):
        RemoteModel("127.0.0.1:8000", pair.tokenizer)
    with pytest.raises(ConfigError, match="scoring"):
        RemoteModel("http://127.0.0.1:8000/v1", pair.tokenizer, scoring="echo")
