"""The client's session: opened lazily, kept alive by a heartbeat, reopened when lost."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
import uuid

import structlog
from google.protobuf.duration_pb2 import Duration

from swarmrl._errors import NotFoundError, SwarmError
from swarmrl._transport import Transport
from swarmrl_proto.v1 import session_service_pb2 as session_pb2

_log = structlog.get_logger("swarmrl")


def is_session_lost(err: BaseException) -> bool:
    """Whether the server has forgotten the session (e.g. it restarted with a fresh store)."""
    return isinstance(err, NotFoundError) and err.reason == "SESSION_NOT_FOUND"


class Session:
    """A session whose id the client makes, so opening (and reopening) it is idempotent.

    The first episode opens it; a background task then renews the lease every third
    of the granted lease. A heartbeat that fails is logged, never raised: the next
    tick tries again, and a server that forgot the session gets it reopened.
    """

    def __init__(self, transport: Transport) -> None:
        self.id = str(uuid.uuid4())
        self.server_instance = ""
        self._transport = transport
        self._lock = asyncio.Lock()
        self._lease = transport.config.session_lease
        self._opened = False
        self._heartbeat: asyncio.Task[None] | None = None
        self._last_renewed = time.monotonic()

    async def ensure_open(self) -> str:
        """Opens the session unless it is open; returns its id."""
        if not self._opened:  # checked outside the lock too: the lock stays off the hot path
            async with self._lock:
                if not self._opened:
                    await self._open()
        return self.id

    async def reopen(self) -> None:
        """Opens the session again after the server lost it."""
        async with self._lock:
            await self._open()

    async def _open(self) -> None:
        lease = Duration()
        lease.FromTimedelta(datetime.timedelta(seconds=self._transport.config.session_lease))
        request = session_pb2.OpenSessionRequest(
            session_id=self.id, client_name=self._transport.config.client_name, lease=lease,
            agent_version=self._transport.config.agent_version,
        )
        response = await self._transport.unary(
            "OpenSession", lambda s: s.sessions.OpenSession, request, retryable=True
        )
        granted = response.lease.ToTimedelta().total_seconds()
        self._lease = granted if granted > 0 else self._transport.config.session_lease
        if self.server_instance and response.server_instance != self.server_instance:
            _log.info("server restarted", session_id=self.id, server=response.server_instance)
        self.server_instance = response.server_instance
        self._opened = True
        self._last_renewed = time.monotonic()
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.create_task(self._beat(), name="swarmrl-heartbeat")

    async def _beat(self) -> None:
        request = session_pb2.HeartbeatRequest(session_id=self.id)
        while True:
            interval = self._lease / 3
            await asyncio.sleep(interval)
            try:
                # Not retried: the next tick is the retry, and a slow retry loop would
                # delay the ticks after it.
                await self._transport.unary(
                    "Heartbeat",
                    lambda s: s.sessions.Heartbeat,
                    request,
                    retryable=False,
                    timeout=interval,
                )
                self._last_renewed = time.monotonic()
            except NotFoundError:
                _log.warning("session lost; reopening", session_id=self.id)
                try:
                    await self.reopen()
                except SwarmError as err:
                    _log.warning("session reopen failed", session_id=self.id, error=str(err))
            except SwarmError as err:
                _log.warning(
                    "heartbeat failed",
                    session_id=self.id,
                    error=str(err),
                    unhealthy_for=round(time.monotonic() - self._last_renewed, 1),
                    lease=self._lease,
                )

    async def close(self) -> None:
        """Stops the heartbeat and closes the session (its open episodes are aborted)."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
        if not self._opened:
            return
        self._opened = False
        try:
            # Best effort and brief: a server that is down forgets the session anyway.
            await self._transport.unary(
                "CloseSession",
                lambda s: s.sessions.CloseSession,
                session_pb2.CloseSessionRequest(session_id=self.id),
                retryable=False,
                timeout=5.0,
            )
        except SwarmError as err:
            _log.info("session close failed", session_id=self.id, error=str(err))
