"""`asymspec serve`: an OpenAI-compatible HTTP server over one `AsymSpecChat` (FastAPI on uvicorn): chat completions,
completions of a plain prompt, models, health and Prometheus metrics.

Each request decodes in a worker thread (`aio.iterate_in_thread`); the engine interleaves the requests' blocks
and keeps one cache set per conversation (engine/pool.py), so many clients share one pair. At most `max_queue`
requests are admitted at once (running or waiting); the next one gets 503 with a Retry-After header, as does one
that waited too long for room in the cache pool's KV budget (the calls in progress hold it). With API
keys set (`--api-key`, `ASYMSPEC_API_KEY`), every `/v1/*` route wants `Authorization: Bearer KEY` (401 otherwise);
`/health` and `/metrics` (Prometheus, server/metrics.py) stay open.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import logging
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from .. import arguments
from ..aio import iterate_in_thread
from ..chat import AsymSpecChat
from ..context.tool_format import ParsedToolCall
from ..engine import GenerationConfig
from ..errors import AsymSpecError, CacheBudgetError, ContextTooLongError
from ..models.remote import RemoteModelError, is_remote
from . import openai_format as wire
from .metrics import ServerMetrics
from .process import DRAIN_SECONDS

DEFAULT_PORT = 8000
DEFAULT_MAX_QUEUE = 16
DEFAULT_MAX_BODY_BYTES = 32 << 20  # a whole window of text is ~50 kB; 32 MiB leaves room for long agent histories
API_KEY_ENV = "ASYMSPEC_API_KEY"
REQUEST_ID_HEADER = "X-Request-Id"
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # what a client may name its request (no spaces, no newlines)
LOG_LEVELS = ("debug", "info", "warning", "error")
log = logging.getLogger("asymspec.serve")  # one line per request at INFO


def create_app(chat: AsymSpecChat, *, model_name: str = "asymspec", max_queue: int = DEFAULT_MAX_QUEUE,
               config: GenerationConfig | None = None, api_keys: tuple[str, ...] = (),
               max_tokens_limit: int | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
               request_timeout: float | None = None) -> FastAPI:
    """The app serving `chat` as `model_name` (chat completions, and completions of a plain prompt); `config`: the
    generation settings requests start from; `api_keys`: the keys a `/v1/*` request must bear (none: open to
    whoever reaches the port); `max_tokens_limit`: the most new tokens a request may ask for (400 past it; past the
    models' window always); `max_body_bytes`: the largest request body read (413 past it); `request_timeout`:
    seconds a reply may take (504 past it, or an error event in a stream; the decode stops at its next block, which
    leaves the conversation's caches as they were)."""
    window = chat.engine.context_window
    token_limit = min(window, max_tokens_limit or window)
    base = config or chat.config
    keys = [key.encode() for key in api_keys]
    admitted = 0  # requests running or waiting; the event loop is the only writer
    metrics = ServerMetrics(lambda: chat.engine.pool.stats, lambda: admitted)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        # one worker thread per admitted request: a waiting request never holds up the running ones
        executor = ThreadPoolExecutor(max_workers=max_queue, thread_name_prefix="asymspec-request")
        asyncio.get_running_loop().set_default_executor(executor)
        yield
        executor.shutdown(wait=False, cancel_futures=True)
        log.info("stopped")

    app = FastAPI(title="asymspec-agents", lifespan=lifespan)
    app.add_middleware(BodyLimit, limit=max_body_bytes)
    fastapi_openapi = app.openapi

    def openapi() -> dict:
        """FastAPI's OpenAPI document, naming the one model this server answers to (clients and fuzzers read it)."""
        if app.openapi_schema is None:
            schemas = fastapi_openapi()["components"]["schemas"]
            for request in ("ChatCompletionRequest", "CompletionRequest"):
                schemas[request]["properties"]["model"]["enum"] = [model_name]
        return app.openapi_schema

    app.openapi = openapi

    @app.middleware("http")  # added before the log: the log wraps it and records 401s too
    async def authorize(request: Request, call_next):
        if keys and request.url.path.startswith("/v1/") and not _bears_a_key(request, keys):
            return JSONResponse(wire.error_body("A valid API key is required: send the header 'Authorization: Bearer "
                                                "KEY' with a key the server was started with (--api-key).",
                                                code="invalid_api_key"), status_code=401)
        return await call_next(request)

    @app.middleware("http")
    async def log_request(request: Request, call_next):
        started = time.perf_counter()
        # the client's X-Request-Id (a safe one) or a new one: in the response and in every log line of the request
        offered = request.headers.get(REQUEST_ID_HEADER, "")
        request.state.id = offered if REQUEST_ID.fullmatch(offered) else uuid.uuid4().hex
        response = await call_next(request)
        response.headers[REQUEST_ID_HEADER] = request.state.id
        metrics.request(_route(app, request.scope), response.status_code)
        if not getattr(request.state, "logs_itself", False):  # a reply logs itself once it is complete
            log.info("%s %s %s %d %.2f s", request.state.id, request.method, request.url.path, response.status_code,
                     time.perf_counter() - started)
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(_problem(e) for e in exc.errors())
        return JSONResponse(wire.error_body(f"Invalid request: {problems}."), status_code=400)

    @app.get("/health")
    async def health() -> dict:
        pool = chat.engine.pool.stats
        return {"status": "ok", "model": model_name, "admitted": admitted, "max_queue": max_queue,
                "models": _where(chat.engine), "cache_pool": {**vars(pool), "hit_rate": round(pool.hit_rate, 4)}}

    @app.get("/metrics", include_in_schema=False)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [_model_card(model_name)]}

    @app.get("/v1/models/{name}")
    async def model(name: str):
        if name != model_name:
            return _unknown_model(name, model_name)
        return _model_card(model_name)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: wire.ChatCompletionRequest, request: Request):
        return await serve(request, body, wire.chat_arguments, chat.stream, wire.CHAT)

    @app.post("/v1/completions")
    async def completions(body: wire.CompletionRequest, request: Request):
        return await serve(request, body, wire.completion_arguments, chat.complete, wire.TEXT)

    async def serve(request: Request, body, arguments_of, run, form: wire.WireFormat):
        """A completion request of either format: admitted or refused, decoded in a worker thread, answered whole
        or as a stream of events."""
        nonlocal admitted
        if body.model != model_name:
            return _unknown_model(body.model, model_name)
        if admitted >= max_queue:
            return JSONResponse(wire.error_body(f"The server is busy: {admitted} requests are in progress, its queue "
                                                f"holds {max_queue}. Retry shortly, or start it with a larger "
                                                "--max-queue.", "server_overloaded", "queue_full"),
                                status_code=503, headers={"Retry-After": "1"})
        try:
            arguments = arguments_of(body, base)
        except AsymSpecError as exc:
            return _client_error(exc)
        arguments["cache_scope"] = _tenant(request, body.cache_salt) if keys or body.cache_salt else None
        if arguments["config"].max_new_tokens > token_limit:
            why = (f"the models' window holds {window} tokens" if token_limit == window
                   else f"this server allows at most {token_limit} (--max-tokens-limit)")
            return JSONResponse(wire.error_body(f"max_tokens={arguments['config'].max_new_tokens} is more than "
                                                f"can be generated: {why}. Ask for fewer.", code="max_tokens_too_large",
                                                param="max_tokens"), status_code=400)
        admitted += 1
        started = time.perf_counter()
        request_id = wire.new_request_id(form.id_prefix)
        deltas = iterate_in_thread(lambda: run(**arguments))
        deadline = None if request_timeout is None else started + request_timeout
        try:
            first = await _next(deltas, deadline)  # bad messages or tools fail here: a 4xx, not a broken stream
            metrics.first_token.observe(time.perf_counter() - started)
        except AsymSpecError as exc:
            admitted -= 1
            return _client_error(exc)
        except ReplyTimedOut as exc:
            admitted -= 1
            await deltas.aclose()
            return _timed_out(exc)
        except BaseException:
            admitted -= 1
            raise

        request.state.logs_itself = True

        async def all_deltas() -> AsyncIterator:
            nonlocal admitted
            reply = first.reply
            try:
                yield first
                while (delta := await _next(deltas, deadline)) is not None:
                    reply = delta.reply or reply
                    yield delta
            finally:
                admitted -= 1
                await deltas.aclose()
                seconds = time.perf_counter() - started
                _log_reply(request.state.id, request.url.path, reply, body.stream, seconds)
                if reply is not None:
                    metrics.reply(reply, seconds)

        if not body.stream:
            reply = None
            try:
                async for delta in all_deltas():
                    reply = delta.reply or reply
            except AsymSpecError as exc:  # e.g. a remote verifier that went down mid-reply
                return _client_error(exc)
            except ReplyTimedOut as exc:
                return _timed_out(exc)
            return form.response(reply, model_name, request_id)
        include_usage = bool((body.stream_options or {}).get("include_usage"))
        return StreamingResponse(_events(all_deltas(), form, model_name, request_id, include_usage),
                                 media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    return app


class ReplyTimedOut(Exception):
    """A reply took longer than the server's --request-timeout."""


async def _next(deltas: AsyncIterator, deadline: float | None):
    """The next delta, None at the end; ReplyTimedOut once `deadline` (perf_counter seconds) passes. Cancelling the
    wait stops the decode's worker at its next block (aio.iterate_in_thread)."""
    try:
        if deadline is None:
            return await deltas.__anext__()
        return await asyncio.wait_for(deltas.__anext__(), max(0.0, deadline - time.perf_counter()))
    except StopAsyncIteration:
        return None
    except asyncio.TimeoutError:
        raise ReplyTimedOut("The reply took longer than this server's --request-timeout allows and was stopped; "
                            "ask for fewer max_tokens, or retry.") from None


def _timeout_body(exc: ReplyTimedOut) -> dict:
    return wire.error_body(str(exc), "timeout", "request_timeout")


def _timed_out(exc: ReplyTimedOut) -> JSONResponse:
    return JSONResponse(_timeout_body(exc), status_code=504)


async def _events(deltas: AsyncIterator, form: wire.WireFormat, model: str, request_id: str,
                  include_usage: bool) -> AsyncIterator[str]:
    """Server-sent events: the opening chunk, text and tool-call deltas, the finish reason, usage if asked,
    [DONE]."""
    if form.opening is not None:
        yield _event(form.opening(model, request_id))
    calls = 0
    try:
        async for delta in deltas:
            if delta.text:
                yield _event(form.text(model, request_id, delta.text))
            if isinstance(delta.tool_call, ParsedToolCall):  # chat completions only
                yield _event(wire.chunk(model, request_id, wire.tool_call_delta(delta.tool_call, calls)))
                calls += 1
            elif delta.tool_call is not None:  # a call cut off by max_tokens: its text stays in the content
                yield _event(form.text(model, request_id, delta.tool_call.raw))
            if delta.reply is not None:
                yield _event(form.finish(model, request_id, delta.reply))
                if include_usage:
                    yield _event(form.usage(model, request_id, delta.reply))
    except ReplyTimedOut as exc:  # the status line is sent: report in the stream, as OpenAI's servers do
        yield _event(_timeout_body(exc))
    except Exception as exc:
        yield _event(wire.error_body(f"Generation failed: {exc}", "server_error"))
    yield "data: [DONE]\n\n"


def _log_reply(request_id: str, path: str, reply, stream: bool, seconds: float) -> None:
    """The request's log line: tokens read by each view, tokens written, what the cache pool did, time."""
    how = "stream" if stream else "json"
    if reply is None:  # the client went away, or the decode failed (its error went to the client)
        log.info("%s POST %s %s ended early after %.2f s", request_id, path, how, seconds)
        return
    prefill = " ".join(f"{name} {s.prefill_tokens}" for name, s in reply.stats.streams.items())
    log.info("%s POST %s 200 %s prompt %d (full %d) completion %d %s cache %s prefill %s %.2f s",
             request_id, path, how, reply.usage.input_tokens, reply.usage.full_input_tokens,
             reply.usage.output_tokens, reply.finish_reason, reply.stats.cache, prefill, seconds)


class BodyLimit:
    """413 for a request body over `limit` bytes, by its Content-Length or, sent in chunks, as soon as it grows past
    the limit: a client cannot make the server hold an unbounded body."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._refuse(send)
        seen, too_large = 0, False

        async def counted():  # past the limit the body ends there, and what the app answers is replaced
            nonlocal seen, too_large
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                too_large = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def answer(message):
            if not too_large:
                await send(message)
            elif message["type"] == "http.response.start":
                await self._refuse(send)

        await self.app(scope, counted, answer)

    async def _refuse(self, send) -> None:
        body = json.dumps(wire.error_body(f"The request body is larger than this server reads ({self.limit} bytes, "
                                          "--max-body-mb); send a shorter conversation.", code="body_too_large"))
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body.encode()})


def _route(app: FastAPI, scope: dict) -> str:
    """The path template a request went to (/v1/models/{name} counts as one route), also for requests refused
    before routing (401)."""
    from starlette.routing import Match

    route = scope.get("route") or next((r for r in app.router.routes if r.matches(scope)[0] == Match.FULL), None)
    return route.path if route is not None else "unmatched"


def _tenant(request: Request, salt: str | None) -> str:
    """Whose caches a request may reuse: those of requests with its API key and its `cache_salt`."""
    key = request.headers.get("authorization", "")
    return hashlib.sha256(f"{len(key)}:{key}|{salt or ''}".encode()).hexdigest()


def _bears_a_key(request: Request, keys: list[bytes]) -> bool:
    """Whether the request's bearer token is one of `keys`, each compared in constant time."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    offered = token.strip().encode() if scheme.lower() == "bearer" else b""
    return any([hmac.compare_digest(offered, key) for key in keys])  # a list: every key compared, found or not


def _problem(error: dict) -> str:
    if error.get("type") == "json_invalid":
        return f"the body is not valid JSON ({error.get('ctx', {}).get('error', 'invalid')} at character {error['loc'][-1]})"
    where = ".".join(str(part) for part in error["loc"] if part != "body") or "body"
    return f"{where}: {error['msg']}"


def _event(body: dict) -> str:
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


def _client_error(exc: AsymSpecError) -> JSONResponse:
    if isinstance(exc, RemoteModelError):  # a model's own server failed, not the request
        return JSONResponse(wire.error_body(str(exc), "upstream_error"), status_code=502)
    if isinstance(exc, CacheBudgetError):  # the calls in progress hold the KV budget: the request may come again
        return JSONResponse(wire.error_body(str(exc), "server_overloaded", "kv_budget_full"), status_code=503,
                            headers={"Retry-After": "5"})
    code = "context_length_exceeded" if isinstance(exc, ContextTooLongError) else None
    return JSONResponse(wire.error_body(str(exc), code=code), status_code=400)


def _unknown_model(name: str, served: str) -> JSONResponse:
    return JSONResponse(wire.error_body(f"The model {name!r} is not served here; this server serves {served!r} "
                                        "(GET /v1/models).", code="model_not_found"), status_code=404)


def _where(engine) -> dict:
    """Where each model runs: "here" (weights in this process) or its server's address."""
    return {role: None if model is None else model.base_url if is_remote(model) else "here"
            for role, model in (("verifier", engine.verifier), ("drafter", engine.drafter))}


def _model_card(name: str) -> dict:
    return {"id": name, "object": "model", "created": int(time.time()), "owned_by": "asymspec-agents"}


# -- command line ------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.max_queue < 1:
        parser.error("--max-queue must be at least 1")
    if args.request_timeout is not None and not args.request_timeout > 0:
        parser.error("--request-timeout is a number of seconds above 0")
    try:
        chat, config = _build(args, arguments.settings(args))
    except AsymSpecError as exc:
        print(f"asymspec serve: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(format="%(asctime)s asymspec serve: %(message)s", datefmt="%H:%M:%S",
                        level=args.log_level.upper(), stream=sys.stderr)
    keys = tuple(args.api_key or ()) + ((os.environ[API_KEY_ENV],) if os.environ.get(API_KEY_ENV) else ())
    app = create_app(chat, model_name=args.model_name, max_queue=args.max_queue, config=config, api_keys=keys,
                     max_tokens_limit=args.max_tokens_limit, max_body_bytes=int(args.max_body_mb * (1 << 20)),
                     request_timeout=args.request_timeout)
    access = (f"{len(keys)} API key{'s' * (len(keys) > 1)} required on /v1/*" if keys else
              "no API key: open to whoever reaches the port (--api-key or ASYMSPEC_API_KEY sets one)")
    print(f"asymspec serve: {args.model_name} on http://{args.host}:{args.port}/v1 - {_describe(args, chat, config)}"
          f"; {access}", file=sys.stderr, flush=True)
    # keep-alive longer than an agent's tool step: a client reusing a connection the server just closed fails.
    # SIGTERM or Ctrl-C: new connections are refused, replies in progress get up to DRAIN_SECONDS to finish
    # uvicorn drains, then raises the signal again for the handler it found: a SIGTERM then ends with status 0
    signal.signal(signal.SIGTERM, _exit_drained)
    server = DrainingServer(uvicorn.Config(app, host=args.host, port=args.port, timeout_graceful_shutdown=DRAIN_SECONDS,
                                           log_level="debug" if args.log_level == "debug" else "warning",
                                           timeout_keep_alive=60))
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn raises Ctrl-C's signal again once drained, as uvicorn.run() expects
        pass
    return 0


class DrainingServer(uvicorn.Server):
    """uvicorn's server, saying in the log when a signal starts its drain."""

    def handle_exit(self, sig: int, frame) -> None:
        if not self.should_exit:
            log.info("%s: draining, up to %d s for the replies in progress", signal.Signals(sig).name, DRAIN_SECONDS)
        super().handle_exit(sig, frame)


def _exit_drained(signum, frame) -> None:
    raise SystemExit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asymspec serve", description="An OpenAI-compatible server over an "
                                     "AsymSpec pair: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health, GET /metrics.")
    arguments.add_pair(parser)
    parser.add_argument("--model-name", default="asymspec", help="the name clients ask for (default: asymspec)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port to listen on (default: {DEFAULT_PORT})")
    parser.add_argument("--api-key", action="append", metavar="KEY", help="a key clients must send as "
                        "'Authorization: Bearer KEY' on /v1/* (repeatable; also read from ASYMSPEC_API_KEY); "
                        "default: none, the server answers whoever reaches it")
    parser.add_argument("--max-tokens-limit", type=int, metavar="N", help="the most new tokens a request may ask "
                        "for (400 past it; default: the models' window)")
    parser.add_argument("--max-body-mb", type=float, default=DEFAULT_MAX_BODY_BYTES / (1 << 20),
                        help=f"the largest request body read, MiB; 413 past it (default {DEFAULT_MAX_BODY_BYTES >> 20})")
    parser.add_argument("--request-timeout", type=float, metavar="SECONDS", help="the most a reply may take; "
                        "504 past it (an error event in a stream), the decode stopped (default: no limit)")
    parser.add_argument("--max-queue", type=int, default=DEFAULT_MAX_QUEUE,
                        help=f"requests admitted at once, running or waiting; more get 503 (default {DEFAULT_MAX_QUEUE})")
    parser.add_argument("--kv-budget-gib", type=float, default=None,
                        help="KV cache the pool keeps across conversations, GiB (default: the engine's, 4)")
    parser.add_argument("--budget", action="append", default=[], metavar="KIND=TOKENS",
                        help="compression budget of one kind (user, assistant, tool_result, passage, tools); repeatable")
    parser.add_argument("--compressor", action="append", default=[], metavar="KIND=NAME",
                        help="compressor of one text kind (head_tail, bm25, embedding, surprisal); repeatable")
    parser.add_argument("--keep-last-turns", type=int, default=None, help="turns kept whole in the verifier's view")
    parser.add_argument("--drafter-budget", type=int, default=None, metavar="TOKENS",
                        help="the drafter reads passages and tool results over TOKENS as their BM25 selection for "
                             "the question (a retrieval view; default: whole)")
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS,
                        help="info (default): one line per request; warning: errors only; debug: uvicorn's too")
    arguments.add_settings(parser)
    return parser


def _describe(args: argparse.Namespace, chat: AsymSpecChat, config: GenerationConfig) -> str:
    """The pair and how it decodes, for the start line: `verifier bundled-agent, drafter bundled-small, ...`."""
    from ..models import resolve_pair

    verifier, drafter = resolve_pair(args.verifier, arguments.drafter(args))
    resolved = chat.engine.decoding(config)
    rule = (f", rule {resolved.acceptance}, bonus {'fused' if resolved.fuse_bonus else 'unfused'}, "
            f"copy head {resolved.copy_weight:g}" if resolved.mode == "asymmetric" else "")
    return f"verifier {verifier}, drafter {drafter or 'none'}, mode {resolved.mode}{rule}"


def _build(args: argparse.Namespace, settings: dict) -> tuple[AsymSpecChat, GenerationConfig]:
    from ..context import CompressionPolicy
    from ..engine import AsymSpecEngine
    from ..errors import ConfigError
    def pairs(items: list[str], what: str, cast) -> dict:
        out = {}
        for item in items:
            kind, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"--{what} takes KIND=VALUE, got {item!r}.")
            try:
                out[kind] = cast(value)
            except ValueError as exc:
                raise ConfigError(f"--{what} {item!r}: {exc}") from exc
        return out

    policy = CompressionPolicy(budgets=pairs(args.budget, "budget", lambda v: None if v == "none" else int(v)),
                               compressors=pairs(args.compressor, "compressor", str),
                               keep_last_turns=args.keep_last_turns, drafter_budget=args.drafter_budget)
    config = GenerationConfig(**settings)
    budget = {} if args.kv_budget_gib is None else {"kv_budget": int(args.kv_budget_gib * (1 << 30))}
    engine = AsymSpecEngine.from_pretrained(verifier=args.verifier, drafter=arguments.drafter(args),
                                            tokenizer=args.tokenizer, threads=args.threads, **budget)
    return AsymSpecChat(engine, policy=policy, config=config), config


if __name__ == "__main__":
    sys.exit(main())
