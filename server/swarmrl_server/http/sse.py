"""Server-sent events, and what happens when the client goes away."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from fastapi import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

T = TypeVar("T")

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(data: Any, event: str | None = None) -> str:
    """One SSE event; `data` is JSON-encoded unless it is already a string."""
    body = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "") + f"data: {body}\n\n"


class EventStreamResponse(StreamingResponse):
    """A `text/event-stream` response that always closes its generator.

    Starlette cancels the sending task when the client disconnects; closing the
    generator too makes its `finally` blocks (and the engine request's) run now,
    not whenever the garbage collector finds it.
    """

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[str]) -> None:
        super().__init__(content, headers=SSE_HEADERS)
        self._events = content

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            aclose = getattr(self._events, "aclose", None)
            if aclose is not None:
                await aclose()


class ClientDisconnected(Exception):
    """The client went away before a unary response was ready."""


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Runs `work`, cancelling it if the client disconnects first (vLLM's
    `with_cancellation`): a dropped request must not keep the engine busy."""
    task = asyncio.ensure_future(work)

    async def wait_for_disconnect() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    watcher = asyncio.ensure_future(wait_for_disconnect())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # we are cancelled ourselves (server stopping): take `work` along
        task.cancel()
        watcher.cancel()
        raise
    watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):  # its outcome no longer matters
        await task
    raise ClientDisconnected()
