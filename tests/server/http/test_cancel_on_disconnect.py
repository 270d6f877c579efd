"""`http.serving.cancel_on_disconnect`: a unary call's work runs in the request's own task
and stops the moment its client goes away, and only then (the server stopping is not a
disconnect)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from swarmrl_server.http.serving import cancel_on_disconnect
from swarmrl_server.http.sse import ClientDisconnected


class FakeRequest:
    """An ASGI request whose body was read: `receive` answers a disconnect once told to."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}


async def test_the_work_runs_in_the_callers_task_and_its_result_returns() -> None:
    request = FakeRequest()
    caller = asyncio.current_task()

    async def work() -> object:
        return asyncio.current_task()

    assert await cancel_on_disconnect(request, work()) is caller  # type: ignore[arg-type]
    assert caller is not None and caller.cancelling() == 0


async def test_a_disconnect_cancels_the_work_and_reads_as_a_disconnect() -> None:
    request = FakeRequest()
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.Event().wait()  # an engine call that would run on
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def leave() -> None:
        await started.wait()
        request.gone.set()

    leaving = asyncio.create_task(leave())
    with pytest.raises(ClientDisconnected):
        await asyncio.wait_for(cancel_on_disconnect(request, work()), 10)  # type: ignore[arg-type]
    await leaving
    assert cancelled.is_set()
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0  # the cancel it asked for is taken back


async def test_the_server_cancelling_the_request_is_not_a_disconnect() -> None:
    request = FakeRequest()
    started = asyncio.Event()

    async def work() -> None:
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(cancel_on_disconnect(request, work()))  # type: ignore[arg-type]
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
