"""Client sessions and their leases.

A client opens a session (its own id, so reopening is idempotent) and renews
the lease by heartbeat. A reaper aborts the open episodes of sessions whose
lease ran out, so a crashed client never pins half-finished episodes; what else
lasts with a session (a hold of training bound to it) is dropped by the same
`on_expire` hook, which runs whenever a session ends, closed or reaped.

A session belongs to the principal that opened it: only that principal (or an
admin) may reopen, heartbeat, close or declare-done it; others get NOT_FOUND.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import structlog

from swarmrl_server.errors import Reason, invalid, not_found
from swarmrl_server.security import IN_PROCESS, Principal, require_owner
from swarmrl_server.store.records import SessionRecord
from swarmrl_server.store.sqlite import SqliteStore

log = structlog.get_logger("swarmrl.sessions")

MIN_LEASE_S = 1.0
MAX_LEASE_S = 600.0
DEFAULT_LEASE_S = 30.0


class SessionTable:
    """Live sessions, persisted so a restarted server keeps honouring them."""

    def __init__(self, store: SqliteStore, on_expire: Callable[[str, str], Awaitable[int]]) -> None:
        self._store = store
        self._sessions: dict[str, SessionRecord] = {}
        # Called with (session_id, reason); aborts the session's open episodes.
        self._on_expire = on_expire
        self._reaper: asyncio.Task[None] | None = None

    async def load(self) -> None:
        """Restores sessions after a restart. Leases restart from now: the server was
        down, so clients had no way to heartbeat."""
        now = time.time()
        for s in await self._store.load_sessions():
            s.expires_at = now + s.lease_s
            self._sessions[s.session_id] = s

    def start_reaper(self, interval_s: float = 0.5) -> None:
        self._reaper = asyncio.create_task(self._reap_forever(interval_s), name="session-reaper")

    async def stop_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            try:
                await self._reaper
            except asyncio.CancelledError:
                pass

    def __len__(self) -> int:
        return len(self._sessions)

    def ids(self) -> set[str]:
        """Ids of the sessions whose lease is live."""
        return set(self._sessions)

    def expiry(self, session_id: str) -> float | None:
        """When the live session `session_id`'s lease runs out unless renewed (seconds
        since the epoch); None when no such session is live."""
        record = self._sessions.get(session_id)
        return None if record is None else record.expires_at

    async def open(
        self, session_id: str, client_name: str, lease_s: float | None,
        *, caller: Principal,
    ) -> SessionRecord:
        if not session_id:
            raise invalid("session_id", "must not be empty")
        if len(session_id) > 128:
            raise invalid("session_id", "must be at most 128 characters")
        if len(client_name) > 256:
            raise invalid("client_name", "must be at most 256 characters")
        owner = caller.name
        existing = self._sessions.get(session_id)
        if existing is not None:
            # Reopening renews the lease; only the owner may, and an admin keeps the owner.
            if not caller.may_act_on(existing.owner):
                raise invalid("session_id", "is taken; choose another session id")
            owner = existing.owner
        lease = DEFAULT_LEASE_S if not lease_s else min(max(lease_s, MIN_LEASE_S), MAX_LEASE_S)
        record = SessionRecord(session_id, client_name, lease, time.time() + lease, owner)
        await self._store.put_session(record)
        self._sessions[session_id] = record
        return record

    def require(self, session_id: str, *, caller: Principal) -> SessionRecord:
        """The live session `session_id` if `caller` owns it; NOT_FOUND otherwise."""
        record = self._sessions.get(session_id)
        if record is None:
            raise not_found(Reason.SESSION_NOT_FOUND, "session", session_id)
        require_owner(caller, record.owner, Reason.SESSION_NOT_FOUND, "session", session_id)
        return record

    async def heartbeat(self, session_id: str, *, caller: Principal) -> SessionRecord:
        record = self.require(session_id, caller=caller)
        record.expires_at = time.time() + record.lease_s
        # Persisting every heartbeat would cost an fsync each; the expiry is
        # recomputed from the lease on restart anyway, so memory is enough.
        return record

    async def close(
        self, session_id: str, reason: str = "session closed", *, caller: Principal
    ) -> int:
        record = self._sessions.get(session_id)
        # Closing is idempotent: an unknown session answers 0, and so does another
        # principal's, which stays open (the answer must not tell the two apart).
        if record is None or not caller.may_act_on(record.owner):
            return 0
        del self._sessions[session_id]
        await self._store.delete_session(session_id)
        return await self._on_expire(session_id, reason)

    async def _reap_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            now = time.time()
            for session_id in [s for s, r in self._sessions.items() if r.expires_at < now]:
                try:
                    aborted = await self.close(session_id, reason="lease expired", caller=IN_PROCESS)
                    log.info("session_expired", session_id=session_id, aborted_episodes=aborted)
                except Exception:  # keep reaping the others
                    log.exception("session_reap_failed", session_id=session_id)
