"""The cache pool: conversations that alternate keep their caches; concurrent calls equal serial ones."""

import threading

import pytest

from asymspec_agents import AsymSpecEngine, GenerationConfig
from asymspec_agents.errors import CacheBudgetError
from asymspec_agents.testing import wait_for
from asymspec_agents.engine.kv_cache import GrowingLayer

SYSTEM = "system: You answer briefly and exactly. Tools: search, lookup, calculator, weather, calendar.\n"
CONFIG = GenerationConfig(mode="asymmetric", max_new_tokens=12)


def conversation(tokenizer, name: str, turns: int) -> list[tuple[list[int], list[int]]]:
    """Per turn: the user text appended (replies are appended as generated); the comp view drops the system line."""
    return [tokenizer(f"user: {name} question {t}, about {name * (t + 2)}?\nassistant:")["input_ids"] for t in range(turns)]


def run_serial(pair, tokenizer, name: str, turns: int) -> list[list[int]]:
    """One conversation alone on a fresh engine."""
    engine = AsymSpecEngine(pair.verifier, pair.drafter, tokenizer)
    return list(Conversation(engine, tokenizer, name, turns).steps())


class Conversation:
    def __init__(self, engine, tokenizer, name, turns):
        self.engine, self.turns = engine, conversation(tokenizer, name, turns)
        self.system = tokenizer(SYSTEM)["input_ids"]
        self.history: list[int] = []
        self.results = []

    def steps(self):
        for turn in self.turns:
            self.history += turn
            result = self.engine.generate(self.system + self.history, self.history, CONFIG)
            self.results.append(result)
            self.history += result.token_ids
            yield result.token_ids


def test_alternating_conversations_each_prefill_only_their_new_tokens_and_equal_their_serial_runs(pair):
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    names = ["alpha", "beta", "gamma", "delta"]
    chats = [Conversation(engine, pair.tokenizer, name, 3) for name in names]
    steppers = [chat.steps() for chat in chats]
    replies = {name: [] for name in names}
    for _ in range(3):  # round robin: every call follows a call of another conversation
        for name, stepper in zip(names, steppers):
            replies[name].append(next(stepper))
    for name, chat in zip(names, chats):
        assert replies[name] == run_serial(pair, pair.tokenizer, name, 3), name
        first, *later = chat.results
        assert first.stats.cache == ("fresh" if name == "alpha" else "branched")
        for turn, result in zip(chat.turns[1:], later):
            assert result.stats.cache == "continued"
            for stream in result.stats.streams.values():
                assert stream.prefill_tokens <= len(turn) + 1, (name, stream)
    # the others branched off alpha's system line: copied, not prefilled
    assert chats[1].results[0].stats.streams["S_full"].reused_tokens >= len(chats[1].system) - 1
    stats = engine.pool.stats
    assert (stats.calls, stats.continued, stats.branched, stats.fresh, stats.sets) == (12, 8, 3, 1, 4)
    assert stats.hit_rate == pytest.approx(8 / 12) and stats.evictions == 0 and stats.kv_bytes > 0


def test_the_least_recently_used_conversation_is_evicted_over_budget_and_then_served_correctly(pair):
    probe = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    Conversation(probe, pair.tokenizer, "alpha", 1).steps().__next__()
    one_set = probe.pool.stats.kv_bytes
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer, kv_budget=int(one_set * 1.5))
    chats = [Conversation(engine, pair.tokenizer, name, 2) for name in ("alpha", "beta")]
    steppers = [chat.steps() for chat in chats]
    replies = [[next(s) for s in steppers], [next(s) for s in steppers]]
    assert [r[0] for r in replies] == run_serial(pair, pair.tokenizer, "alpha", 2)
    assert [r[1] for r in replies] == run_serial(pair, pair.tokenizer, "beta", 2)
    stats = engine.pool.stats
    assert stats.evictions >= 2 and stats.sets == 1 and stats.kv_bytes <= one_set * 3
    assert chats[0].results[1].stats.cache != "continued"  # its set was gone: prefilled again, same reply


def test_threads_calling_one_engine_at_once_get_their_serial_results(pair):
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    names = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    got, errors = {}, []
    start = threading.Barrier(len(names))

    def work(name):
        try:
            start.wait(timeout=30)
            got[name] = list(Conversation(engine, pair.tokenizer, name, 2).steps())
        except Exception as exc:  # reported below with its name
            errors.append((name, exc))

    threads = [threading.Thread(target=work, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors and all(not t.is_alive() for t in threads)
    for name in names:
        assert got[name] == run_serial(pair, pair.tokenizer, name, 2), name


def test_parallel_branches_of_one_history_give_their_serial_replies_and_share_its_prefix(pair):
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    system = pair.tokenizer(SYSTEM)["input_ids"]
    history = pair.tokenizer("user: a long shared history of one graph " * 4)["input_ids"]
    engine.generate(system + history, history, CONFIG)
    branches = [pair.tokenizer(f"\nbranch {i}: summarise part {i}.\nassistant:")["input_ids"] for i in range(3)]
    results = [None] * len(branches)

    def branch(i):
        results[i] = engine.generate(system + history + branches[i], history + branches[i], CONFIG)

    threads = [threading.Thread(target=branch, args=(i,)) for i in range(len(branches))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    fresh = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    for i, result in enumerate(results):
        assert result.token_ids == fresh.generate(system + history + branches[i], history + branches[i], CONFIG).token_ids
        for stream in result.stats.streams.values():
            assert stream.prefill_tokens <= len(branches[i]) + 1  # the shared history came from the cache


def test_interleaved_streams_in_one_thread_do_not_disturb_each_other(pair):
    """Two conversations streamed block by block in turn (as an async server interleaves them)."""
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    a = pair.tokenizer("user: first conversation, rather long text " * 3)["input_ids"]
    b = pair.tokenizer("user: second one, other words entirely " * 3)["input_ids"]
    streams = [engine.stream(a, a[-20:], CONFIG), engine.stream(b, b[-20:], CONFIG)]
    tokens = [[], []]
    live = [True, True]
    while any(live):
        for i, stream in enumerate(streams):
            if live[i]:
                chunk = next(stream, None)
                live[i] = chunk is not None
                tokens[i] += chunk.token_ids if chunk else []
    fresh = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    assert tokens == [fresh.generate(a, a[-20:], CONFIG).token_ids, fresh.generate(b, b[-20:], CONFIG).token_ids]


def test_reset_forgets_every_set_and_a_negative_budget_is_refused(pair):
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    ids = pair.tokenizer("some prompt text")["input_ids"]
    engine.generate(ids, ids, CONFIG)
    assert engine.pool.stats.sets == 1
    engine.reset()
    assert engine.pool.stats.sets == 0 and engine.pool.stats.kv_bytes == 0
    with pytest.raises(Exception, match="kv_budget"):
        AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer, kv_budget=-1)


def test_kv_bytes_counts_every_layers_keys_and_values(pair):
    engine = AsymSpecEngine(pair.verifier, None, pair.tokenizer)
    ids = pair.tokenizer("count these tokens")["input_ids"]
    engine.generate(ids, ids, mode="full", max_new_tokens=3)
    config = pair.verifier.config
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * (
        getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads) * 4
    (stream,) = [s for st in engine.pool._sets for s in st.streams.values()]
    # the keys and values of every token, and the room the growing buffers keep for the next ones
    assert per_token * len(stream.ids) <= stream.nbytes <= per_token * GrowingLayer.room(len(stream.ids))


def test_a_call_with_no_room_in_the_budget_waits_for_the_call_in_progress_first_come_first_served(pair):
    """A budget of one byte: a call always starts alone, never beside another (its caches would pass the budget)."""
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer, kv_budget=1)
    ids = {name: pair.tokenizer(f"user: {name} asks about {name * 3}?\nassistant:")["input_ids"]
           for name in ("alpha", "beta", "gamma")}
    holding = engine.stream(ids["alpha"], ids["alpha"][1:], CONFIG)
    first = next(holding)  # alpha's call is in progress, its set busy, between two blocks
    finished, results = [], {}

    def call(name):
        results[name] = engine.generate(ids[name], ids[name][1:], CONFIG).token_ids
        finished.append(name)

    waiting = []
    for count, name in enumerate(("beta", "gamma"), start=1):
        waiting.append(threading.Thread(target=call, args=(name,)))
        waiting[-1].start()
        assert wait_for(lambda: engine.pool.stats.waiting == count, every=0.01), engine.pool.stats
    assert not finished and engine.pool.stats.busy == 1
    alpha = first.token_ids + [t for chunk in holding for t in chunk.token_ids]
    for thread in waiting:
        thread.join(timeout=300)
    assert finished == ["beta", "gamma"]  # in the order they came
    fresh = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    for name, tokens in [("alpha", alpha), *results.items()]:
        assert tokens == fresh.generate(ids[name], ids[name][1:], CONFIG).token_ids, name
    stats = engine.pool.stats
    assert (stats.sets, stats.waiting, stats.busy, stats.evictions) == (1, 0, 0, 2)


def test_a_call_that_finds_no_room_in_time_gets_a_cache_budget_error_and_the_pool_goes_on(pair):
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer, kv_budget=1)
    engine.pool.room_wait = 0.2
    a = pair.tokenizer("user: the first conversation\nassistant:")["input_ids"]
    b = pair.tokenizer("user: another one entirely\nassistant:")["input_ids"]
    holding = engine.stream(a, a, CONFIG)
    next(holding)
    with pytest.raises(CacheBudgetError, match="kv_budget"):
        engine.generate(b, b, CONFIG)
    list(holding)
    assert engine.pool.stats.waiting == 0
    assert engine.generate(b, b, CONFIG).token_ids  # room again once the first call ended


def test_a_call_reserves_at_least_what_its_streams_come_to_hold(pair):
    engine = AsymSpecEngine(pair.verifier, pair.drafter, pair.tokenizer)
    ids = pair.tokenizer("user: reserve enough for this reply, please\nassistant:")["input_ids"]
    engine.generate(ids, ids[-5:], CONFIG)
    (chosen,) = engine.pool._sets
    new_tokens = CONFIG.max_new_tokens + engine.decoding(CONFIG).k_max + 1
    for (role, view), stream in chosen.streams.items():
        prompt = len(ids if view == "full" else ids[-5:])
        assert 0 < stream.nbytes <= stream.bytes_for(prompt + new_tokens), (role, view)
        assert stream.bytes_for(len(stream.ids)) >= stream.nbytes
