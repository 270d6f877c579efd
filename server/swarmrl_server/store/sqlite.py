"""The trajectory store: SQLite in WAL mode, one writer thread, one object.

Every episode, call, reward and server event is committed before the RPC that
made it returns, so a server killed at any moment restarts from its data
directory with every ended episode (invariant 3). `path=":memory:"` gives the
same store without durability, for tests.

Callers hold one `SqliteStore`; its queries live by concern, each a class over the one
connection (`store.core`, which says why one thread owns it):

- `store.sessions`  client sessions and their leases
- `store.episodes`  episodes: opened, rewarded, ended (queued per model) or aborted, read
- `store.calls`     calls, committed in groups
- `store.ledger`    the trainers' ledger: what waits for a model, what each step consumed
- `store.versions`  policy versions issued and lost, and recoveries
- `store.events`    the sequence-numbered event log

The tables and their migrations are `store.schema`'s; records as rows, `store.rows`.
"""

from __future__ import annotations

from pathlib import Path

from swarmrl_server.store.calls import CallQueries
from swarmrl_server.store.episodes import EpisodeQueries, ModelQueued
from swarmrl_server.store.events import EventQueries
from swarmrl_server.store.ledger import LedgerQueries
from swarmrl_server.store.sessions import SessionQueries
from swarmrl_server.store.versions import VersionQueries

__all__ = ["ModelQueued", "SqliteStore"]


class SqliteStore(SessionQueries, EpisodeQueries, CallQueries, LedgerQueries, VersionQueries,
                  EventQueries):
    """Durable store of sessions, episodes, calls, the trainers' ledger and events.

    `on_model_queued` is a seam into the multi-model commit: a crash test passes one that
    blocks after the first model's write, to SIGKILL the server between two writes of the
    real code path (tests/crash_server.py).
    """

    def __init__(self, path: Path | str, *, on_model_queued: ModelQueued | None = None) -> None:
        super().__init__(path)
        self._on_model_queued = on_model_queued
