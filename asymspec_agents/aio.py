"""Async over the blocking engine: one worker thread per call, the event loop only awaits a queue."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

_DONE = object()


def iterate_in_thread(make_iterator: Callable[[], Iterator[Any]]) -> AsyncIterator[Any]:
    """An async generator over a blocking iterator that runs in a worker thread (both integrations' async paths).

    Closing the async generator early, or cancelling the task awaiting it, stops the worker at its next item and
    closes the blocking iterator there (the engine yields only between blocks, so its caches stay consistent)."""

    async def generate():
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()
        stop = threading.Event()

        def work():
            iterator = make_iterator()
            try:
                for item in iterator:
                    if stop.is_set():
                        break
                    loop.call_soon_threadsafe(queue.put_nowait, (item, None))
            except BaseException as exc:  # handed to the consumer, raised there
                loop.call_soon_threadsafe(queue.put_nowait, (_DONE, exc))
                return
            finally:
                close = getattr(iterator, "close", None)
                if close is not None:
                    close()
            loop.call_soon_threadsafe(queue.put_nowait, (_DONE, None))

        worker = loop.run_in_executor(None, work)
        try:
            while True:
                item, error = await queue.get()
                if error is not None:
                    raise error
                if item is _DONE:
                    break
                yield item
        finally:
            stop.set()
            await worker

    return generate()
