"""The store's one connection: SQLite in WAL mode, owned by one writer thread.

All SQLite work runs on one dedicated thread: sqlite3 connections are not safe to share
between threads, and commits (an fsync with synchronous=FULL) must not block the asyncio
loop that serves gRPC. Each concern's queries (`store.sessions`, `store.episodes`, ...)
are methods over this core; `store.sqlite.SqliteStore` joins them into one object.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from swarmrl_server.store.schema import prepare

T = TypeVar("T")


class StoreCore:
    """The connection, its thread, and one transaction at a time."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        # One thread owns the connection; every method hops onto it.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="swarmrl-store"
        )
        self._conn: sqlite3.Connection | None = None

    async def open(self) -> None:
        await self._run(self._open)

    def _open(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        prepare(conn)
        self._conn = conn

    async def close(self) -> None:
        def _close() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await self._run(_close)
        self._executor.shutdown(wait=True)

    async def _run(self, fn: Callable[[], T]) -> T:
        """`fn()` on the store's thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn)

    async def _write(self, statements: Callable[[sqlite3.Connection], T]) -> T:
        """`statements` in one transaction on the store's thread (`_tx`)."""
        return await self._run(lambda: self._tx(statements))

    @property
    def conn(self) -> sqlite3.Connection:
        assert self._conn is not None, "store is not open"
        return self._conn

    def _tx(self, statements: Callable[[sqlite3.Connection], T]) -> T:
        """Runs `statements` in one transaction: all of it lands or none of it does."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = statements(conn)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result
