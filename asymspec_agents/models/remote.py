"""Models on a serving engine: a stock vLLM server scores and drafts by token ids (docs/deploy.md).

`RemoteModel` is the connection to one served model (its name, window and tokenizer, retries, the request shapes);
`engine.remote_stream.RemoteStream` stands where a local model's `KVStream` stands in the engine. The server keeps no
state of ours but its prefix cache, so any coordinator can send any conversation's next block.

Request shapes (`scoring=`). vLLM skips its prefix cache for any request that asks for prompt log-probabilities,
so scoring k+1 positions that way re-reads the whole prompt (measured: 47-187× one cached request per block).
- "batched" (default): the block's k+1 prefixes as ONE request, `prompt` a list of id lists, `max_tokens` 1,
  `logprobs` N: row i is choice i's next-token row. Each prefix reuses the cached ones (measured: 2.3-5.7× one
  cached request; what is left is each prefix recomputing its own unfinished KV block).
- "prompt_logprobs": one request with prompt log-probabilities, for servers without prefix caching.
Sequential single-token forwards (the drafter drafting, the verifier decoding alone) are one ordinary cached
generation of M greedy tokens with N log-probabilities each (`generate`): the rows of the next M forwards,
served from it as long as the caller feeds the tokens the server chose.

Rows. What comes back per position is the top-N log-probabilities plus the sampled token's: exact there; the rest
of the vocabulary shares the leftover mass evenly, each such token getting at most the N-th value (`dense_row`).
Every row is also made exact at the token that follows it, when known (a draft): if the server did not return it,
a second request asks for exactly that token's log-probability (`logprob_token_ids`) on the same, now cached,
prefixes (remote_stream.py). Hence, with the verifier remote (t) and the drafter here:
- greedy decoding on the verifier alone, and both rules' test of a draft (p_V(d), p'(d)), are exact;
- a fused choice argmax(t + β·δ): a token outside the returned set has t ≤ t_N, so it can win only if t_N + β·δ
  beats the best exactly known value; the loop (`engine.remote_stream.TruncatedRows.settle`) fetches the exact t
  of such tokens (up to 128 a row, highest bound first), so greedy decoding equals the engine in process (N = 20
  without this flipped a fused choice whose token ranked 59th in the compressed verifier).
With the drafter remote too, its rows a (full view) and b (compressed view) are truncated the same way: δ = a − b
is exact on tokens both returned and at the drafts; a token a row did not return is read at the row's N-th value
(the most it can have), so a difference errs towards δ = 0; tokens none of the rows returned are not exact, nor is
the JSD gate (spread rows). `top_logprobs=-1` asks for whole rows: exact, and heavy (docs/deploy.md measures both).
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import torch

from ..errors import AsymSpecError, ConfigError

TOKENIZER_PROBE = "AsymSpec checks tokenizers: Grüße, 東京, def f(x): return x**2 \n\t<|im_start|>"
SCORING = ("batched", "prompt_logprobs")
MAX_TOKEN_IDS = 128  # vLLM refuses longer `logprob_token_ids` lists
WHOLE_ROWS = -1  # top_logprobs: every token's log-probability (exact, and ~250× the JSON of N = 200)
MAX_REASKS = 6  # times an answer that lost its log-probabilities is asked again (`RemoteModel._answered`)

Entries = dict[int, float]  # token id -> exact log-probability, one row


class RemoteModelError(AsymSpecError, ConnectionError):
    """A model's server is down, answered with an error, or serves another model."""


class RemoteModel:
    """A model behind vLLM's OpenAI-compatible server, e.g. `RemoteModel("http://127.0.0.1:8000/v1", tokenizer)`.

    `tokenizer`: the tokenizer the pair shares, checked against the server's `/tokenize` at start-up and whenever
    the server changed (None: the one in the served model's folder, when this machine can read it).
    `model`: the served name (default: the only one served; "URL#name" names it too, e.g. a LoRA drafter served
    beside its verifier). `top_logprobs`: N per position (the server must allow it: `--max-logprobs`); -1 asks
    for whole rows, exact everywhere but heavy. `scoring`: "batched" or "prompt_logprobs" (above). Requests time
    out after `timeout` seconds and are retried `retries` times with exponential backoff from `backoff` seconds."""

    def __init__(self, base_url: str, tokenizer=None, *, model: str | None = None, top_logprobs: int = 200,
                 scoring: str = "batched", timeout: float = 120.0, retries: int = 3, backoff: float = 0.5):
        if not is_url(base_url):
            raise ConfigError(f"A remote model URL starts with http:// or https://, got {base_url!r}.")
        base_url, _, named = base_url.partition("#")  # "http://host:8000/v1#name": one of the models served there
        model = model or named or None
        if top_logprobs < 1 and top_logprobs != WHOLE_ROWS:
            raise ConfigError(f"top_logprobs is at least 1, or -1 for whole rows; got {top_logprobs}.")
        if scoring not in SCORING:
            raise ConfigError(f"scoring is one of {', '.join(SCORING)}, got {scoring!r}.")
        self.base_url = base_url.rstrip("/")
        self.top_logprobs, self.scoring = top_logprobs, scoring
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.requested_model = model
        card = self._card()
        self.model_id, self.root = card["id"], card.get("root")
        self.tokenizer = tokenizer if tokenizer is not None else served_tokenizer(self.root, self.base_url)
        window = int(card.get("max_model_len") or 1 << 30)
        self.config = SimpleNamespace(max_position_embeddings=window, eos_token_id=None,
                                      vocab_size=len(self.tokenizer), _name_or_path=f"{self.base_url}#{self.model_id}")
        self.generation_config = SimpleNamespace(eos_token_id=None)
        self._fingerprint: str | None = None  # vLLM's hash of its configuration, model included
        self.reasked = 0  # answers asked again because they lost log-probabilities (`_answered`)
        self._check_tokenizer()

    def __repr__(self) -> str:
        return f"RemoteModel({self.base_url!r}, model={self.model_id!r})"

    # -- the request shapes ----------------------------------------------------------------------------------

    def rows(self, ids: list[int], keep: int) -> list[Entries]:
        """The rows after each of the last `keep` positions of `ids` (top N and the server's choice), one request."""
        if self.scoring == "prompt_logprobs":
            return self._prompt_logprob_rows(ids, keep)
        ends = range(len(ids) - keep + 1, len(ids) + 1)  # row j: the distribution after ids[:end]
        return self._last_rows([ids[:end] for end in ends], logprobs=self.top_logprobs)

    def token_rows(self, prefixes: list[list[int]], tokens: list[int]) -> list[Entries]:
        """For each prefix, the exact log-probabilities of `tokens` as its next token (and of the server's
        choice): one request per `MAX_TOKEN_IDS` tokens."""
        rows: list[Entries] = [{} for _ in prefixes]
        for start in range(0, len(tokens), MAX_TOKEN_IDS):
            part = self._last_rows(prefixes, logprobs=1, logprob_token_ids=tokens[start:start + MAX_TOKEN_IDS])
            for row, entries in zip(rows, part):
                row.update(entries)
        return rows

    def generate(self, ids: list[int], max_tokens: int) -> tuple[list[int], list[Entries]]:
        """Greedy tokens after `ids` (up to `max_tokens`, fewer at EOS or the window), each with the row it was
        chosen from: the rows of that many single-token forwards, in one cached request."""
        max_tokens = max(1, min(max_tokens, self.config.max_position_embeddings - len(ids)))
        body = {"prompt": ids, "max_tokens": max_tokens, "temperature": 0.0, "logprobs": self.top_logprobs}

        def read(answer: dict) -> tuple[list[int], list[Entries]]:
            logprobs = answer["choices"][0].get("logprobs") or {}
            tokens = [_token_id(token) for token in logprobs.get("tokens") or []]
            rows = [_entries(row) for row in logprobs.get("top_logprobs") or []]
            if not tokens or len(rows) != len(tokens):
                raise RemoteModelError(f"{self.base_url} returned {len(tokens)} tokens with {len(rows)} rows; is it "
                                       "vLLM with --max-logprobs large enough?")
            return tokens, rows

        return self._answered(body, read, lambda out: self._whole(out[1]))

    def _last_rows(self, prompts: list[list[int]], **logprob_args) -> list[Entries]:
        """One request: for each prompt, the row of its next token."""
        body = {"prompt": prompts, "max_tokens": 1, "temperature": 0.0, **logprob_args}

        def read(answer: dict) -> list[Entries]:
            choices = sorted(answer["choices"], key=lambda choice: choice["index"])
            rows = [((choice.get("logprobs") or {}).get("top_logprobs") or [None])[0] for choice in choices]
            if len(rows) != len(prompts) or any(row is None for row in rows):
                raise RemoteModelError(f"{self.base_url} returned {len(rows)} rows for {len(prompts)} prompts; is "
                                       "it vLLM with --max-logprobs large enough?")
            return [_entries(row) for row in rows]

        wanted = logprob_args.get("logprob_token_ids")
        if wanted:
            return self._answered(body, read, lambda rows: all(
                all(math.isfinite(row.get(t, -math.inf)) for t in wanted) for row in rows))
        return self._answered(body, read, self._whole)

    def _answered(self, body: dict, read, whole):
        """`read` of the server's answer to `body`, asked again while `whole(answer)` says it lost entries.

        vLLM 0.32's sampler answers every request of a batch step with `logprob_token_ids` rows when any one of
        them asked for such ids: a top-N request sharing a step with another conversation's fill-in comes back
        with only its chosen token. Asked again, it lands in another step."""
        for attempt in range(MAX_REASKS + 1):
            if attempt:
                time.sleep(0.01 * 2 ** attempt)
            out = read(self._completions(body))
            if whole(out):
                return out
            self.reasked += 1
        raise RemoteModelError(f"{self.base_url} answered {MAX_REASKS + 1} times without the log-probabilities "
                               "asked for (docs/deploy.md: vLLM's batch-wide logprob_token_ids).")

    def _whole(self, rows: list[Entries]) -> bool:
        """Whether every top-N row holds N finite entries (or the whole vocabulary's, for whole rows)."""
        size = len(self.tokenizer) if self.top_logprobs == WHOLE_ROWS else min(self.top_logprobs, len(self.tokenizer))
        return all(sum(math.isfinite(v) for v in row.values()) >= size for row in rows)

    def _prompt_logprob_rows(self, ids: list[int], keep: int) -> list[Entries]:
        """The whole prompt scored with prompt log-probabilities (vLLM then reads it afresh)."""
        body = {"prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": self.top_logprobs,
                "logprobs": self.top_logprobs}
        choice = self._completions(body)["choices"][0]
        prompt_rows = choice.get("prompt_logprobs") or []
        last = (choice.get("logprobs") or {}).get("top_logprobs") or [None]
        if len(prompt_rows) != len(ids) or last[0] is None:
            raise RemoteModelError(f"{self.base_url} returned {len(prompt_rows)} prompt rows for {len(ids)} tokens "
                                   "and no next-token row; is it vLLM with --max-logprobs large enough?")
        return [_entries(prompt_rows[position + 1]) if position + 1 < len(ids) else _entries(last[0])
                for position in range(len(ids) - keep, len(ids))]

    # -- the connection --------------------------------------------------------------------------------------

    def _completions(self, body: dict) -> dict:
        answer = self._request("POST", "/completions",
                               {"model": self.model_id, "return_tokens_as_token_ids": True, **body})
        fingerprint = answer.get("system_fingerprint")
        if fingerprint != self._fingerprint:
            if self._fingerprint is not None:  # restarted, or replaced: refuse another model
                self._check_identity()
            self._fingerprint = fingerprint
        return answer

    def _card(self) -> dict:
        cards = self._request("GET", "/models")["data"]
        served = [card["id"] for card in cards]
        if self.requested_model is None and len(served) != 1:
            raise RemoteModelError(f"The server at {self.base_url} serves {served}; name the one to use (model=...).")
        if self.requested_model is not None and self.requested_model not in served:
            raise RemoteModelError(f"The server at {self.base_url} serves {served}, not {self.requested_model!r}.")
        return next(card for card in cards if self.requested_model in (None, card["id"]))

    def _check_identity(self) -> None:
        """The server's configuration changed: it must still serve the same model, with the same tokenizer."""
        card = self._card()
        if (card["id"], card.get("root")) != (self.model_id, self.root):
            raise RemoteModelError(f"The server at {self.base_url} now serves {card['id']!r} from "
                                   f"{card.get('root')!r}, not {self.model_id!r} from {self.root!r}: it was replaced "
                                   "by another model. Point this engine at the original model's server.")
        self._check_tokenizer()

    def _check_tokenizer(self) -> None:
        root = self.base_url.removesuffix("/v1")
        theirs = self._request("POST", "/tokenize", {"model": self.model_id, "prompt": TOKENIZER_PROBE,
                                                     "add_special_tokens": False}, root=root)["tokens"]
        ours = self.tokenizer(TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]
        if list(theirs) != list(ours):
            first = next((i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b), min(len(theirs), len(ours)))
            raise RemoteModelError(
                f"The server's model {self.model_id!r} tokenizes differently from the local tokenizer (first "
                f"difference at token {first}: {theirs[first:first + 3]} vs {ours[first:first + 3]}); serve a model "
                "of the pair's family, or pass that model's own tokenizer.")

    def _request(self, method: str, path: str, body: dict | None = None, *, root: str | None = None) -> dict:
        return request_json(self.base_url, method, path, body, root=root, timeout=self.timeout, retries=self.retries,
                            backoff=self.backoff)


def request_json(base_url: str, method: str, path: str, body: dict | None = None, *, root: str | None = None,
                 timeout: float = 30.0, retries: int = 1, backoff: float = 0.5) -> dict:
    """One JSON request to a server (`root` instead of `base_url` for paths outside /v1), retried with exponential
    backoff where the server is down or fails (5xx); a refusal (4xx) is raised at once."""
    url = (root or base_url) + path
    data = json.dumps(body).encode() if body is not None else None
    problem = None
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff * 2 ** (attempt - 1))
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            if exc.code < 500:  # the request is wrong: retrying cannot help
                raise RemoteModelError(f"{method} {url} was refused ({exc.code}): {detail}") from exc
            problem = f"{exc.code}: {detail}"
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            problem = str(getattr(exc, "reason", exc))
    raise RemoteModelError(f"The server at {base_url} did not answer {method} {path} after {retries + 1} tries "
                           f"({problem}); start it (e.g. `make vllm-start`) or check the URL. The engine's caches are "
                           "intact: retry the call once it is up.")


def served_tokenizer(root: str | None, base_url: str):
    """The tokenizer in the served model's folder, when this machine has that folder."""
    if not root or not Path(root).is_dir():
        raise ConfigError(f"The server at {base_url} serves {root!r}, which is not a folder on this machine: pass "
                          "the pair's tokenizer (a hub id or folder), e.g. "
                          "tokenizer='HuggingFaceTB/SmolLM2-135M-Instruct'.")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(root)


def served_window(base_url: str) -> int:
    """The context window of the model a server serves (its `max_model_len`), from one GET."""
    cards = request_json(base_url.rstrip("/"), "GET", "/models")["data"]
    return min(int(card.get("max_model_len") or 1 << 30) for card in cards)


def dense_row(entries: Entries, vocab_size: int, top_n: int | None = None) -> torch.Tensor:
    """A `[vocab]` row of log-probabilities: exact where returned; the leftover mass spread evenly over the other
    tokens (all one value, `RemoteStream.unreturned` finds them again), each getting at most the N-th largest
    returned value (`top_n`: the server's N; entries beyond its top N are exact values asked for later)."""
    known = {i: lp for i, lp in entries.items() if 0 <= i < vocab_size}
    mass = sum(math.exp(lp) for lp in known.values())
    others = vocab_size - len(known)
    rest = math.log(max(1.0 - mass, 1e-12) / others) if others else -math.inf
    ranked = sorted(known.values(), reverse=True)
    floor = ranked[min(top_n or len(ranked), len(ranked)) - 1] if ranked else rest
    row = torch.full((vocab_size,), min(rest, floor), dtype=torch.float32)
    index = torch.tensor(list(known), dtype=torch.long)
    row[index] = torch.tensor(list(known.values()), dtype=torch.float32)
    return row


def is_remote(model) -> bool:
    return isinstance(model, RemoteModel)


def is_url(name) -> bool:
    """A model name that is a server's address."""
    return isinstance(name, str) and name.startswith(("http://", "https://"))


def _entries(row: dict) -> Entries:
    """A vLLM row, {"token_id:42": logprob} (completions) or {"42": {"logprob": ...}} (prompt rows)."""
    return {_token_id(key): float(value["logprob"] if isinstance(value, dict) else value) for key, value in row.items()}


def _token_id(key) -> int:
    text = str(key)
    return int(text.split(":", 1)[1] if text.startswith("token_id:") else text)
