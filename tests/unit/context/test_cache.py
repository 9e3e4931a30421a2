import threading

from asymspec_agents.context.cache import LRUCache, content_key


def test_least_recently_used_entry_is_evicted_first():
    cache = LRUCache(maxsize=2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get_or_compute("a", lambda: 0)  # touch a
    cache.put("c", 3)
    assert "b" not in cache and "a" in cache and "c" in cache
    assert cache.get_or_compute("b", lambda: "recomputed") == ("recomputed", False)


def test_hits_and_misses_are_counted():
    cache = LRUCache(maxsize=8)
    cache.get_or_compute("k", lambda: 1)
    cache.get_or_compute("k", lambda: 2)
    assert (cache.hits, cache.misses) == (1, 1)


def test_concurrent_lookups_agree_and_stay_bounded():
    cache = LRUCache(maxsize=64)
    results = []

    def worker(offset):
        for i in range(500):
            key = (i + offset) % 100
            value, _ = cache.get_or_compute(key, lambda key=key: key * 2)
            results.append(value == key * 2)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(results) and len(results) == 4000
    assert len(cache) <= 64


def test_setdefault_keeps_the_first_value():
    cache = LRUCache(maxsize=4)
    assert cache.setdefault("q", None) is None
    assert cache.setdefault("q", "later") is None


def test_content_key_distinguishes_types_and_part_boundaries():
    assert content_key("None") != content_key(None)
    assert content_key("ab", "c") != content_key("a", "bc")
    assert content_key("x", 1) == content_key("x", 1)
