"""Policy versions as issued, those lost with a crash, and the recoveries from one."""

from __future__ import annotations

import sqlite3
import time

from swarmrl_server.store.core import StoreCore


class VersionQueries(StoreCore):
    """The `policy_versions` and `recoveries` tables."""

    async def record_version(self, model: str, version: int, step: int) -> None:
        """Logs `version` as issued (committed before the weights are served). The
        primary key makes issuing a version twice fail instead of renaming weights."""
        await self._write(lambda c: c.execute(
            "INSERT INTO policy_versions (model, version, step, created_at) VALUES (?, ?, ?, ?)",
            (model, version, step, time.time())))

    async def issued_versions(self, model: str) -> list[tuple[int, int, bool]]:
        """(version, step, lost) of every version ever issued for `model`, in order."""
        def _list() -> list[tuple[int, int, bool]]:
            rows = self.conn.execute(
                "SELECT version, step, lost FROM policy_versions WHERE model=? ORDER BY version",
                (model,)).fetchall()
            return [(v, s, bool(lost)) for v, s, lost in rows]

        return await self._run(_list)

    async def mark_versions_lost(self, model: str, above: int) -> int:
        """Marks every version above `above` lost (its weights died with a crash)."""
        def _mark(c: sqlite3.Connection) -> int:
            return c.execute("UPDATE policy_versions SET lost=1 WHERE model=? AND version>? "
                             "AND lost=0", (model, above)).rowcount

        return await self._write(_mark)

    async def record_recovery(self, model: str, checkpoint_step: int, lost_from: int,
                              lost_to: int, retrained: int) -> None:
        await self._write(lambda c: c.execute(
            "INSERT INTO recoveries VALUES (?, ?, ?, ?, ?, ?)",
            (model, checkpoint_step, lost_from, lost_to, retrained, time.time())))
