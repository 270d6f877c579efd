"""The trajectory store: SQLite in WAL mode, one writer thread.

Every episode, call, reward and server event is committed before the RPC that
made it returns, so a server killed at any moment restarts from its data
directory with every ended episode (invariant 3). `path=":memory:"` gives the
same store without durability, for tests.

All SQLite work runs on one dedicated thread: sqlite3 connections are not
safe to share between threads, and commits (an fsync with synchronous=FULL)
must not block the asyncio loop that serves gRPC.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from swarmrl_server.store.records import CallRecord, EpisodeRecord, EpisodeState, SessionRecord
from swarmrl_server.store.rows import (
    CALL_COLUMNS,
    INSERT_CALL,
    call_from_row,
    call_row,
    episode_from_row,
)
from swarmrl_server.store.schema import prepare

T = TypeVar("T")

ModelQueued = Callable[[str, str, int], None]
"""Called as (episode_id, model, index) inside the open transaction that ends an episode,
right after that model's queue row is written."""


class SqliteStore:
    """Durable store of sessions, episodes, calls and events.

    `on_model_queued` is a seam into the multi-model commit: a crash test passes one that
    blocks after the first model's write, to SIGKILL the server between two writes of the
    real code path (tests/crash_server.py).
    """

    def __init__(self, path: Path | str, *, on_model_queued: ModelQueued | None = None) -> None:
        self.path = str(path)
        self._on_model_queued = on_model_queued
        # One thread owns the connection; every method hops onto it.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="swarmrl-store"
        )
        self._conn: sqlite3.Connection | None = None
        self._call_batch: list[tuple[CallRecord, asyncio.Future[None]]] = []
        self._call_flusher: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------

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

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

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

    # -- sessions ----------------------------------------------------------------

    async def put_session(self, s: SessionRecord) -> None:
        await self._run(
            self._tx,
            lambda c: c.execute(
                "INSERT INTO sessions (session_id, client_name, lease_s, expires_at, owner) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET "
                "client_name=excluded.client_name, lease_s=excluded.lease_s, "
                "expires_at=excluded.expires_at",
                (s.session_id, s.client_name, s.lease_s, s.expires_at, s.owner),
            ),
        )

    async def delete_session(self, session_id: str) -> None:
        await self._run(
            self._tx, lambda c: c.execute("DELETE FROM sessions WHERE session_id=?", (session_id,))
        )

    async def load_sessions(self) -> list[SessionRecord]:
        def _load() -> list[SessionRecord]:
            rows = self.conn.execute(
                "SELECT session_id, client_name, lease_s, expires_at, owner FROM sessions"
            ).fetchall()
            return [SessionRecord(*row) for row in rows]

        return await self._run(_load)

    # -- episodes ----------------------------------------------------------------

    async def create_episode(self, e: EpisodeRecord) -> None:
        await self._run(
            self._tx,
            lambda c: c.execute(
                "INSERT INTO episodes (episode_id, session_id, task_id, group_id, agent_version, "
                "models, labels, state, start_time, start_request_id, owner) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    e.episode_id, e.session_id, e.task_id, e.group_id, e.agent_version,
                    json.dumps(e.models), json.dumps(e.labels), e.state.value, e.start_time,
                    e.start_request_id, e.owner,
                ),
            ),
        )

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
                await self._run(
                    self._tx, lambda c, calls=calls: c.executemany(INSERT_CALL, map(call_row, calls))
                )
            except Exception:  # noqa: BLE001 - isolate the failing row(s)
                for call, future in batch:
                    try:
                        await self._run(
                            self._tx, lambda c, call=call: c.execute(INSERT_CALL, call_row(call))
                        )
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

    async def set_episode_reward(self, episode_id: str, value: float) -> None:
        await self._run(
            self._tx,
            lambda c: c.execute(
                "UPDATE episodes SET reward=? WHERE episode_id=?", (value, episode_id)
            ),
        )

    async def set_call_reward(self, call_id: str, value: float) -> None:
        await self._run(
            self._tx,
            lambda c: c.execute("UPDATE calls SET reward=? WHERE call_id=?", (value, call_id)),
        )

    async def set_model_reward(self, episode_id: str, model: str, value: float) -> None:
        await self._run(
            self._tx,
            lambda c: c.execute(
                "INSERT INTO episode_models (episode_id, model, reward) VALUES (?, ?, ?) "
                "ON CONFLICT(episode_id, model) DO UPDATE SET reward=excluded.reward",
                (episode_id, model, value),
            ),
        )

    async def finish_episode(
        self,
        episode_id: str,
        state: EpisodeState,
        *,
        reward: float | None,
        request_id: str,
        abort_reason: str = "",
        end_time: float | None = None,
        model_rewards: dict[str, float] | None = None,
    ) -> None:
        """Moves an open episode to ENDED or ABORTED in one transaction.

        Ending also queues the episode for every model it lists, with the number of
        calls it made to each and that model's own reward (from `model_rewards`, else
        one submitted earlier), in the same transaction: every model's trainer gets it,
        or none does. Aborting takes it out of every queue.
        """
        end_time = time.time() if end_time is None else end_time

        def _finish(c: sqlite3.Connection) -> None:
            cur = c.execute(
                "UPDATE episodes SET state=?, reward=?, end_request_id=?, abort_reason=?, "
                "end_time=? WHERE episode_id=? AND state=?",
                (state.value, reward, request_id, abort_reason, end_time, episode_id,
                 EpisodeState.OPEN.value),
            )
            if cur.rowcount != 1:
                raise RuntimeError(f"episode {episode_id} is not open")
            if state is not EpisodeState.ENDED:
                c.execute("UPDATE episode_models SET queued=0 WHERE episode_id=?", (episode_id,))
                return
            own = model_rewards or {}
            (models,) = c.execute(
                "SELECT models FROM episodes WHERE episode_id=?", (episode_id,)).fetchone()
            for i, model in enumerate(json.loads(models)):
                c.execute(
                    "INSERT INTO episode_models (episode_id, model, reward, queued, num_calls) "
                    "VALUES (?1, ?2, ?3, 1, (SELECT COUNT(*) FROM calls WHERE episode_id=?1 "
                    "AND model=?2)) ON CONFLICT(episode_id, model) DO UPDATE SET "
                    "reward=COALESCE(?3, reward), queued=1, num_calls=excluded.num_calls",
                    (episode_id, model, own.get(model)),
                )
                if self._on_model_queued is not None:
                    self._on_model_queued(episode_id, model, i)

        await self._run(self._tx, _finish)

    async def get_episode(self, episode_id: str, *, with_calls: bool = False) -> EpisodeRecord | None:
        def _get() -> EpisodeRecord | None:
            row = self.conn.execute(
                "SELECT * FROM episodes WHERE episode_id=?", (episode_id,)
            ).fetchone()
            return None if row is None else self._episode_from_row(row, with_calls)

        return await self._run(_get)

    async def find_episode_by_start_request(
        self, request_id: str, owner: str = ""
    ) -> EpisodeRecord | None:
        """The episode `owner` started with `request_id` (ids are scoped to their owner)."""

        def _find() -> EpisodeRecord | None:
            row = self.conn.execute(
                "SELECT * FROM episodes WHERE owner=? AND start_request_id=?", (owner, request_id)
            ).fetchone()
            return None if row is None else self._episode_from_row(row, False)

        return await self._run(_find)

    async def list_episodes(
        self, state: EpisodeState, *, with_calls: bool = False
    ) -> list[EpisodeRecord]:
        def _list() -> list[EpisodeRecord]:
            rows = self.conn.execute(
                "SELECT * FROM episodes WHERE state=? ORDER BY end_time, start_time", (state.value,)
            ).fetchall()
            return [self._episode_from_row(row, with_calls) for row in rows]

        return await self._run(_list)

    async def unconsumed_ended_episodes(self, model: str) -> list[EpisodeRecord]:
        """Ended episodes with calls to `model` that no training step has consumed, oldest first."""

        def _list() -> list[EpisodeRecord]:
            rows = self.conn.execute(
                "SELECT e.* FROM episodes e JOIN episode_models q ON q.episode_id=e.episode_id "
                "WHERE q.model=? AND q.queued=1 AND q.num_calls>0 AND e.state=? "
                "AND NOT EXISTS (SELECT 1 FROM consumed k WHERE k.episode_id=e.episode_id "
                "AND k.model=?) ORDER BY e.end_time",
                (model, EpisodeState.ENDED.value, model),
            ).fetchall()
            return [self._episode_from_row(row, True) for row in rows]

        return await self._run(_list)

    async def queued_not_called(self, model: str) -> int:
        """Ended episodes that list `model` but never called it (queued with nothing to train)."""

        def _count() -> int:
            row = self.conn.execute(
                "SELECT COUNT(*) FROM episode_models WHERE model=? AND queued=1 AND num_calls=0",
                (model,),
            ).fetchone()
            return int(row[0])

        return await self._run(_count)

    async def mark_consumed(self, model: str, episode_ids: Iterable[str], step: int) -> None:
        ids = list(episode_ids)
        await self._run(
            self._tx,
            lambda c: (c.executemany(
                "INSERT OR REPLACE INTO consumed VALUES (?, ?, ?)",
                [(e, model, step) for e in ids],
            ), c.executemany(  # append-only: what every step consumed, lost steps included
                "INSERT INTO consumed_log VALUES (?, ?, ?)", [(e, model, step) for e in ids])),
        )

    async def consumed_episodes(self, model: str) -> dict[str, int]:
        def _get() -> dict[str, int]:
            rows = self.conn.execute(
                "SELECT episode_id, step FROM consumed WHERE model=?", (model,)
            ).fetchall()
            return {r[0]: r[1] for r in rows}

        return await self._run(_get)

    async def forget_consumed_after(self, model: str, step: int) -> None:
        """Un-consumes episodes of steps after `step` (resuming from an older checkpoint)."""
        await self._run(
            self._tx,
            lambda c: c.execute(
                "DELETE FROM consumed WHERE model=? AND step>?", (model, step)
            ),
        )

    async def episode_tallies(
        self, session_ids: Iterable[str]
    ) -> list[tuple[str, str, str, str, str, int]]:
        """(session, agent version, task, models JSON, state, count) of the sessions' episodes."""
        ids = list(session_ids)

        def _tally() -> list[tuple[str, str, str, str, str, int]]:
            if not ids:
                return []
            marks = ",".join("?" * len(ids))
            return self.conn.execute(
                "SELECT session_id, agent_version, task_id, models, state, COUNT(*) FROM episodes "
                f"WHERE session_id IN ({marks}) GROUP BY session_id, agent_version, task_id, "
                "models, state",
                ids,
            ).fetchall()

        return await self._run(_tally)

    async def agent_version_tallies(self) -> list[tuple[str, str, int, float | None, int]]:
        """(agent version, state, episodes, mean reward, episodes some trainer consumed)."""

        def _tally() -> list[tuple[str, str, int, float | None, int]]:
            return self.conn.execute(
                "SELECT e.agent_version, e.state, COUNT(*), AVG(e.reward), "
                "SUM(EXISTS (SELECT 1 FROM consumed k WHERE k.episode_id=e.episode_id)) "
                "FROM episodes e GROUP BY e.agent_version, e.state ORDER BY e.agent_version"
            ).fetchall()

        return await self._run(_tally)

    # -- policy versions ---------------------------------------------------------

    async def record_version(self, model: str, version: int, step: int) -> None:
        """Logs `version` as issued (committed before the weights are served). The
        primary key makes issuing a version twice fail instead of renaming weights."""
        await self._run(self._tx, lambda c: c.execute(
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

        return await self._run(self._tx, _mark)

    async def record_recovery(self, model: str, checkpoint_step: int, lost_from: int,
                              lost_to: int, retrained: int) -> None:
        await self._run(self._tx, lambda c: c.execute(
            "INSERT INTO recoveries VALUES (?, ?, ?, ?, ?, ?)",
            (model, checkpoint_step, lost_from, lost_to, retrained, time.time())))

    async def consumed_after(self, model: str, step: int) -> tuple[int, int]:
        """(episodes consumed by steps after `step`, the highest such step or `step`)."""
        def _count() -> tuple[int, int]:
            n, top = self.conn.execute(
                "SELECT COUNT(*), MAX(step) FROM consumed WHERE model=? AND step>?",
                (model, step)).fetchone()
            return int(n), int(top if top is not None else step)

        return await self._run(_count)

    async def counts(self) -> dict[str, int]:
        def _counts() -> dict[str, int]:
            rows = self.conn.execute(
                "SELECT state, COUNT(*) FROM episodes GROUP BY state"
            ).fetchall()
            return {state: n for state, n in rows}

        return await self._run(_counts)

    def _episode_from_row(self, row: tuple[Any, ...], with_calls: bool) -> EpisodeRecord:
        episode_id = row[0]
        calls = self._calls(episode_id) if with_calls else []
        num_calls = len(calls) if with_calls else self.conn.execute(
            "SELECT COUNT(*) FROM calls WHERE episode_id=?", (episode_id,)
        ).fetchone()[0]
        return episode_from_row(row, calls, num_calls, self._model_rewards(episode_id))

    def _model_rewards(self, episode_id: str) -> dict[str, float]:
        rows = self.conn.execute(
            "SELECT model, reward FROM episode_models WHERE episode_id=? AND reward IS NOT NULL",
            (episode_id,),
        ).fetchall()
        return {model: reward for model, reward in rows}

    def _calls(self, episode_id: str) -> list[CallRecord]:
        rows = self.conn.execute(
            f"SELECT {CALL_COLUMNS} FROM calls WHERE episode_id=? ORDER BY seq", (episode_id,)
        ).fetchall()
        return [call_from_row(r) for r in rows]

    # -- events ------------------------------------------------------------------

    async def append_event(self, kind: str, payload: dict[str, Any]) -> int:
        def _append(c: sqlite3.Connection) -> int:
            cur = c.execute(
                "INSERT INTO events (kind, payload, created_at) VALUES (?, ?, ?)",
                (kind, json.dumps(payload), time.time()),
            )
            assert cur.lastrowid is not None
            return cur.lastrowid

        return await self._run(self._tx, _append)

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
