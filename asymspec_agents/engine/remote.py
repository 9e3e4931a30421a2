"""The verifier on a serving engine: vLLM's OpenAI-compatible API scores each verification block by token ids.

`RemoteVerifier` is the connection (model, window, tokenizer check, retries); `RemoteStream` stands where a local
verifier's `KVStream` stands in the engine: it holds the ids the server has "read" and returns, per position, the
verifier's log-probabilities. The server keeps no state of ours: every block sends the whole prompt, because a
vLLM request that asks for prompt log-probabilities bypasses its prefix cache (measured: a k = 8 block on a 1k
prompt costs a re-prefill, ~4 s on this CPU, against 0.08 s for the same prompt without them).

What comes back per position is the top-N log-probabilities plus the actual next token's (vLLM always includes
it), so each row is exact on those tokens; the rest of the vocabulary shares the leftover probability mass
evenly, each such token getting at most the N-th value. Hence:
- greedy decoding on the verifier alone, and the ratio rule's test p_V(d) of a draft that is the next prompt
  token, are exact;
- a fused choice argmax(t + β·δ) is exact whenever the best returned token beats every other token's bound:
  outside the returned set t ≤ t_N in truth, so the choice is exact when max over returned tokens of t + β·δ ≥
  t_N + β·max δ over the others. That is AsymSpec's own case: the full view's token may rank low in the
  compressed verifier (measured on the bundled pair: N = 20 flipped a fused choice whose token ranked 59th;
  N = 200, the default, gave the local tokens). vLLM returns the N entries for every prompt position, not only
  the block's, so N costs JSON size: ~N × prompt length entries per block.
SGLang's native `/generate` (`input_ids`, `return_logprob`, `logprob_start_len`, `top_logprobs_num`,
`token_ids_logprob`) keeps its radix cache and returns only the asked positions; it needs CUDA and is not built here.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from types import SimpleNamespace

import torch

from ..errors import AsymSpecError, ConfigError
from .stats import StreamStats
from .streams import common_prefix

TOKENIZER_PROBE = "AsymSpec checks tokenizers: Grüße, 東京, def f(x): return x**2 \n\t<|im_start|>"


class RemoteVerifierError(AsymSpecError, ConnectionError):
    """The verifier's server is down, answered with an error, or serves another model."""


class RemoteVerifier:
    """A verifier behind vLLM's OpenAI-compatible server, e.g. `RemoteVerifier("http://127.0.0.1:8000/v1", tok)`.

    `tokenizer`: the local tokenizer the pair shares (the drafter's); checked at start-up against the server's
    `/tokenize`. `top_logprobs`: N per position (the server must allow it: `--max-logprobs`). Requests time out
    after `timeout` seconds and are retried `retries` times with exponential backoff from `backoff` seconds."""

    def __init__(self, base_url: str, tokenizer, *, model: str | None = None, top_logprobs: int = 200,
                 timeout: float = 120.0, retries: int = 3, backoff: float = 0.5):
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"A remote verifier URL starts with http:// or https://, got {base_url!r}.")
        if top_logprobs < 1:
            raise ConfigError(f"top_logprobs must be at least 1, got {top_logprobs}.")
        self.base_url = base_url.rstrip("/")
        self.top_logprobs, self.timeout, self.retries, self.backoff = top_logprobs, timeout, retries, backoff
        self.tokenizer = tokenizer
        cards = self._request("GET", "/models")["data"]
        served = [card["id"] for card in cards]
        if model is not None and model not in served:
            raise RemoteVerifierError(f"The server at {self.base_url} serves {served}, not {model!r}.")
        card = next(c for c in cards if model is None or c["id"] == model)
        self.model_id = card["id"]
        window = int(card.get("max_model_len") or 1 << 30)
        self.config = SimpleNamespace(max_position_embeddings=window, eos_token_id=None, vocab_size=len(tokenizer))
        self.generation_config = SimpleNamespace(eos_token_id=None)
        self._check_tokenizer()

    def __repr__(self) -> str:
        return f"RemoteVerifier({self.base_url!r}, model={self.model_id!r})"

    def log_probs(self, ids: list[int], keep: int, vocab_size: int) -> tuple[torch.Tensor, list[set[int]]]:
        """Rows `[keep, vocab]` of log-probabilities after each of the last `keep` positions of `ids`, and per row
        the token ids the server returned exactly."""
        body = {"model": self.model_id, "prompt": ids, "max_tokens": 1, "temperature": 0.0,
                "prompt_logprobs": self.top_logprobs, "logprobs": self.top_logprobs,
                "return_tokens_as_token_ids": True}
        choice = self._request("POST", "/completions", body)["choices"][0]
        prompt_rows = choice.get("prompt_logprobs") or []
        last = (choice.get("logprobs") or {}).get("top_logprobs") or [None]
        if len(prompt_rows) != len(ids) or last[0] is None:
            raise RemoteVerifierError(f"The server returned {len(prompt_rows)} prompt rows for {len(ids)} tokens and "
                                      f"{'no' if last[0] is None else 'a'} next-token row; is it vLLM with "
                                      "--max-logprobs large enough?")
        rows, exact = [], []
        for position in range(len(ids) - keep, len(ids)):
            entries = _prompt_entry(prompt_rows[position + 1]) if position + 1 < len(ids) else _top_entry(last[0])
            row, known = _row(entries, vocab_size)
            rows.append(row)
            exact.append(known)
        return torch.stack(rows), exact

    # -------------------------------------------------------------------------------------------------------

    def _check_tokenizer(self) -> None:
        root = self.base_url.removesuffix("/v1")
        theirs = self._request("POST", "/tokenize", {"model": self.model_id, "prompt": TOKENIZER_PROBE,
                                                     "add_special_tokens": False}, root=root)["tokens"]
        ours = self.tokenizer(TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]
        if list(theirs) != list(ours):
            first = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
            raise RemoteVerifierError(
                f"The server's model {self.model_id!r} tokenizes differently from the local tokenizer (first "
                f"difference at token {first}: {theirs[first:first + 3]} vs {ours[first:first + 3]}); serve a model "
                "of the drafter's family, or pass the verifier's own tokenizer.")

    def _request(self, method: str, path: str, body: dict | None = None, *, root: str | None = None) -> dict:
        url = (root or self.base_url) + path
        data = json.dumps(body).encode() if body is not None else None
        problem = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            request = urllib.request.Request(url, data=data, method=method,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.load(response)
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:300]
                if exc.code < 500:  # the request is wrong: retrying cannot help
                    raise RemoteVerifierError(f"{method} {url} was refused ({exc.code}): {detail}") from exc
                problem = f"{exc.code}: {detail}"
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                problem = str(getattr(exc, "reason", exc))
        raise RemoteVerifierError(f"The verifier server at {self.base_url} did not answer {method} {path} after "
                                  f"{self.retries + 1} tries ({problem}); start it (e.g. `make vllm-start`) or check "
                                  "the URL. The engine's caches are intact: retry the call once it is up.")


class RemoteStream:
    """The verifier's stream when the verifier is remote: the same contract as `KVStream` (ids, sync, forward,
    rollback), computed by the server from the whole prompt on every forward."""

    cache = None  # no local keys and values: the cache pool counts 0 bytes

    def __init__(self, remote: RemoteVerifier, view: str, vocab_size: int):
        self.model, self.role, self.view, self.vocab_size = remote, "verifier", view, vocab_size
        self.device = torch.device("cpu")
        self.ids: list[int] = []
        self.stats = StreamStats(self.role, view)

    @property
    def name(self) -> str:
        return f"V_{self.view}"

    def __len__(self) -> int:
        return len(self.ids)

    def start_call(self) -> None:
        self.stats = StreamStats(self.role, self.view)

    def sync(self, prompt: list[int], donors=()) -> None:
        keep = common_prefix(self.ids, prompt[:-1])
        self.stats.reused_tokens += keep
        self.stats.prefill_tokens += len(prompt) - 1 - keep  # read by the server with the next forward
        self.ids = list(prompt[:-1])

    def forward(self, tokens: list[int], keep: int | None = None) -> torch.Tensor:
        keep = len(tokens) if keep is None else min(keep, len(tokens))
        started = time.perf_counter()
        rows, _ = self.model.log_probs(self.ids + list(tokens), keep, self.vocab_size)
        self.ids.extend(tokens)  # only once the server answered: a failed call leaves the stream as it was
        s = self.stats
        s.decode_tokens += len(tokens)
        s.decode_forwards += 1
        s.decode_sizes[len(tokens)] += 1
        s.seconds += time.perf_counter() - started
        return rows

    def rollback(self, length: int) -> None:
        if length > len(self.ids):
            raise RuntimeError(f"{self.name} holds {len(self.ids)} tokens, cannot roll back to {length}")
        del self.ids[length:]

    def copy_prefix(self, donor, length: int) -> None:
        self.ids = list(donor.ids[:length])

    def reset(self) -> None:
        self.ids = []


def _prompt_entry(entry: dict) -> dict[int, float]:
    """vLLM's prompt row: {"token_id:42" or "42": {"logprob": ..., ...}}."""
    return {_token_id(key): float(value["logprob"] if isinstance(value, dict) else value) for key, value in entry.items()}


def _top_entry(entry: dict) -> dict[int, float]:
    """The completion's top_logprobs row: {"token_id:42": logprob}."""
    return {_token_id(key): float(value) for key, value in entry.items()}


def _token_id(key) -> int:
    text = str(key)
    return int(text.split(":", 1)[1] if text.startswith("token_id:") else text)


def _row(entries: dict[int, float], vocab_size: int) -> tuple[torch.Tensor, set[int]]:
    """Exact log-probabilities where returned; the leftover mass spread evenly over the other tokens."""
    known = {i: lp for i, lp in entries.items() if 0 <= i < vocab_size}
    mass = sum(math.exp(lp) for lp in known.values())
    others = vocab_size - len(known)
    rest = math.log(max(1.0 - mass, 1e-12) / others) if others else -math.inf
    floor = min(known.values()) if known else rest
    row = torch.full((vocab_size,), min(rest, floor), dtype=torch.float32)
    index = torch.tensor(list(known), dtype=torch.long)
    row[index] = torch.tensor(list(known.values()), dtype=torch.float32)
    return row, set(known)
