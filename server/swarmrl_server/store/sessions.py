"""Client sessions: their leases, kept so a restarted server knows who was attached."""

from __future__ import annotations

from swarmrl_server.store.core import StoreCore
from swarmrl_server.store.records import SessionRecord


class SessionQueries(StoreCore):
    """The `sessions` table."""

    async def put_session(self, s: SessionRecord) -> None:
        await self._write(
            lambda c: c.execute(
                "INSERT INTO sessions (session_id, client_name, lease_s, expires_at, owner) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET "
                "client_name=excluded.client_name, lease_s=excluded.lease_s, "
                "expires_at=excluded.expires_at",
                (s.session_id, s.client_name, s.lease_s, s.expires_at, s.owner),
            ),
        )

    async def delete_session(self, session_id: str) -> None:
        await self._write(
            lambda c: c.execute("DELETE FROM sessions WHERE session_id=?", (session_id,))
        )

    async def load_sessions(self) -> list[SessionRecord]:
        def _load() -> list[SessionRecord]:
            rows = self.conn.execute(
                "SELECT session_id, client_name, lease_s, expires_at, owner FROM sessions"
            ).fetchall()
            return [SessionRecord(*row) for row in rows]

        return await self._run(_load)
