"""Calls, committed in groups: calls added while a commit runs share the next transaction."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

from swarmrl_server.store.core import StoreCore
from swarmrl_server.store.records import CallRecord
from swarmrl_server.store.rows import INSERT_CALL, call_row


class CallQueries(StoreCore):
    """Writes to the `calls` table (reads come with their episode, `store.episodes`)."""

    def __init__(self, path: Path | str) -> None:
        super().__init__(path)
        self._call_batch: list[tuple[CallRecord, asyncio.Future[None]]] = []
        self._call_flusher: asyncio.Task[None] | None = None

    async def add_call(self, call: CallRecord) -> None:
        """Commits `call`; returns once it is durable.

        Group commit: calls added while a commit is running share the next transaction
        (one fsync for all of them), and each caller returns only after its own row is
        committed. A batch that fails is retried row by row, so one bad row fails only
        its own caller."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._call_batch.append((call, future))
        if self._call_flusher is None or self._call_flusher.done():
            self._call_flusher = asyncio.create_task(self._flush_calls())
        await future

    async def _flush_calls(self) -> None:
        while self._call_batch:
            batch, self._call_batch = self._call_batch, []
            calls = [call for call, _ in batch]
            try:
                await self._write(_insert(calls))
            except Exception:  # noqa: BLE001 - isolate the failing row(s)
                for call, future in batch:
                    try:
                        await self._write(_insert([call]))
                    except Exception as exc:  # noqa: BLE001 - handed to that caller
                        if not future.done():
                            future.set_exception(exc)
                    else:
                        if not future.done():
                            future.set_result(None)
                continue
            for _, future in batch:
                if not future.done():
                    future.set_result(None)


def _insert(calls: Sequence[CallRecord]) -> Callable[[sqlite3.Connection], object]:
    """The statements that insert `calls` (in one transaction, by `_write`)."""
    return lambda c: c.executemany(INSERT_CALL, map(call_row, calls))
