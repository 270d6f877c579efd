"""The server's event log: sequence-numbered, durable, read back after a sequence."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from swarmrl_server.store.core import StoreCore


class EventQueries(StoreCore):
    """The `events` table (payloads are JSON objects)."""

    async def append_event(self, kind: str, payload: dict[str, Any]) -> int:
        def _append(c: sqlite3.Connection) -> int:
            cur = c.execute(
                "INSERT INTO events (kind, payload, created_at) VALUES (?, ?, ?)",
                (kind, json.dumps(payload), time.time()),
            )
            assert cur.lastrowid is not None
            return cur.lastrowid

        return await self._write(_append)

    async def events_after(self, sequence: int, limit: int = 1000) -> list[tuple[int, str, dict[str, Any]]]:
        def _list() -> list[tuple[int, str, dict[str, Any]]]:
            rows = self.conn.execute(
                "SELECT sequence, kind, payload FROM events WHERE sequence>? "
                "ORDER BY sequence LIMIT ?",
                (sequence, limit),
            ).fetchall()
            return [(seq, kind, json.loads(payload)) for seq, kind, payload in rows]

        return await self._run(_list)

    async def last_event_sequence(self) -> int:
        def _last() -> int:
            row = self.conn.execute("SELECT MAX(sequence) FROM events").fetchone()
            return int(row[0] or 0)

        return await self._run(_last)
