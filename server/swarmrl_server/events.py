"""The server's event log: durable, sequence-numbered, watched by clients.

Events are appended to the store (so sequence numbers survive a restart and a
client resuming with `after_sequence` misses nothing) and wake every watcher.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from swarmrl_server.store.sqlite import SqliteStore


class EventLog:
    """Appends events and streams them to watchers in order."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store
        self._changed = asyncio.Condition()
        self._closed = False

    async def append(self, kind: str, **payload: Any) -> int:
        sequence = await self._store.append_event(kind, payload)
        async with self._changed:
            self._changed.notify_all()
        return sequence

    async def close(self) -> None:
        """Ends every watch stream (server shutdown)."""
        self._closed = True
        async with self._changed:
            self._changed.notify_all()

    async def watch(self, after_sequence: int) -> AsyncIterator[tuple[int, str, dict[str, Any]]]:
        """Yields (sequence, kind, payload) for every event after `after_sequence`, forever."""
        cursor = after_sequence
        while not self._closed:
            events = await self._store.events_after(cursor)
            for sequence, kind, payload in events:
                cursor = sequence
                yield sequence, kind, payload
            if events:
                continue
            async with self._changed:
                # The timeout only guards against a missed notify between the query and
                # the wait; appends normally wake us at once.
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout=5.0)
                except TimeoutError:
                    pass
