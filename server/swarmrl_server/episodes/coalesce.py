"""Chunks a slow reader has not taken yet travel as one message.

A front door writes each engine chunk as one message (a gRPC stream message, an SSE
event), and a message costs far more than a token: tens of microseconds of
framing, flow control and event-loop hops. When the engine produces tokens faster
than the door writes them, the ones queued meanwhile are joined into one chunk, so
a fast engine costs one message per write rather than one per token, while a slow
engine still streams token by token (nothing is ever held back waiting for more).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TypeVar

from swarmrl_server.engine.base import GenerationChunk, join_chunks

T = TypeVar("T")
_END = object()


async def coalesced(stream: AsyncIterator[GenerationChunk | T]) -> AsyncIterator[GenerationChunk | T]:
    """`stream`'s items in order, adjacent chunks already waiting joined into one.

    The stream is read by a task of its own; errors surface where they occurred in
    the order, and closing this iterator cancels the task (and so the stream).
    """
    queue: asyncio.Queue[object] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for item in stream:
                queue.put_nowait(item)
            queue.put_nowait(_END)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, in order
            queue.put_nowait(exc)

    task = asyncio.create_task(pump())
    try:
        pending: object = None
        while True:
            item = pending if pending is not None else await queue.get()
            pending = None
            while isinstance(item, GenerationChunk) and not queue.empty():
                nxt = queue.get_nowait()
                if not isinstance(nxt, GenerationChunk):
                    pending = nxt
                    break
                item = join_chunks(item, nxt)
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item  # type: ignore[misc]
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
