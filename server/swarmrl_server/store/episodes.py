"""Episodes: opened, rewarded, ended or aborted (and queued for each model's trainer, in
the same transaction), read back with or without their calls, and tallied."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

from swarmrl_server.store.core import StoreCore
from swarmrl_server.store.records import CallRecord, EpisodeRecord, EpisodeState
from swarmrl_server.store.rows import CALL_COLUMNS, call_from_row, episode_from_row

ModelQueued = Callable[[str, str, int], None]
"""Called as (episode_id, model, index) inside the open transaction that ends an episode,
right after that model's queue row is written."""


class EpisodeQueries(StoreCore):
    """The `episodes` and `episode_models` tables (an episode's per-model reward and its
    place in that model's queue)."""

    _on_model_queued: ModelQueued | None = None
    """The seam into the multi-model commit (`SqliteStore`'s `on_model_queued`)."""

    async def create_episode(self, e: EpisodeRecord) -> None:
        await self._write(
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

    async def set_episode_reward(self, episode_id: str, value: float) -> None:
        await self._write(
            lambda c: c.execute(
                "UPDATE episodes SET reward=? WHERE episode_id=?", (value, episode_id)
            ),
        )

    async def set_call_reward(self, call_id: str, value: float) -> None:
        await self._write(
            lambda c: c.execute("UPDATE calls SET reward=? WHERE call_id=?", (value, call_id)),
        )

    async def set_model_reward(self, episode_id: str, model: str, value: float) -> None:
        await self._write(
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

        await self._write(_finish)

    async def get_episode(self, episode_id: str, *, with_calls: bool = False) -> EpisodeRecord | None:
        def _get() -> EpisodeRecord | None:
            row = self.conn.execute(
                "SELECT * FROM episodes WHERE episode_id=?", (episode_id,)
            ).fetchone()
            return None if row is None else read_episode(self.conn, row, with_calls)

        return await self._run(_get)

    async def find_episode_by_start_request(
        self, request_id: str, owner: str = ""
    ) -> EpisodeRecord | None:
        """The episode `owner` started with `request_id` (ids are scoped to their owner)."""

        def _find() -> EpisodeRecord | None:
            row = self.conn.execute(
                "SELECT * FROM episodes WHERE owner=? AND start_request_id=?", (owner, request_id)
            ).fetchone()
            return None if row is None else read_episode(self.conn, row, False)

        return await self._run(_find)

    async def list_episodes(
        self, state: EpisodeState, *, with_calls: bool = False
    ) -> list[EpisodeRecord]:
        def _list() -> list[EpisodeRecord]:
            rows = self.conn.execute(
                "SELECT * FROM episodes WHERE state=? ORDER BY end_time, start_time", (state.value,)
            ).fetchall()
            return [read_episode(self.conn, row, with_calls) for row in rows]

        return await self._run(_list)

    async def counts(self) -> dict[str, int]:
        def _counts() -> dict[str, int]:
            rows = self.conn.execute(
                "SELECT state, COUNT(*) FROM episodes GROUP BY state"
            ).fetchall()
            return {state: n for state, n in rows}

        return await self._run(_counts)

    async def episode_tallies(
        self, session_ids: Iterable[str]
    ) -> list[tuple[str, str, str, str, str, int]]:
        """(session, agent version, task, models JSON, state, count) of the sessions' episodes."""
        ids = list(session_ids)

        def _tally() -> list[tuple[str, str, str, str, str, int]]:
            if not ids:
                return []
            marks = ",".join("?" * len(ids))
            rows: list[tuple[str, str, str, str, str, int]] = self.conn.execute(
                "SELECT session_id, agent_version, task_id, models, state, COUNT(*) FROM episodes "
                f"WHERE session_id IN ({marks}) GROUP BY session_id, agent_version, task_id, "
                "models, state",
                ids,
            ).fetchall()
            return rows

        return await self._run(_tally)

    async def agent_version_tallies(self) -> list[tuple[str, str, int, float | None, int]]:
        """(agent version, state, episodes, mean reward, episodes some trainer consumed)."""

        def _tally() -> list[tuple[str, str, int, float | None, int]]:
            rows: list[tuple[str, str, int, float | None, int]] = self.conn.execute(
                "SELECT e.agent_version, e.state, COUNT(*), AVG(e.reward), "
                "SUM(EXISTS (SELECT 1 FROM consumed k WHERE k.episode_id=e.episode_id)) "
                "FROM episodes e GROUP BY e.agent_version, e.state ORDER BY e.agent_version"
            ).fetchall()
            return rows

        return await self._run(_tally)


def read_episode(conn: sqlite3.Connection, row: tuple[Any, ...], with_calls: bool
                 ) -> EpisodeRecord:
    """The record of an `episodes` row (`SELECT *`), with its calls when `with_calls`."""
    episode_id = row[0]
    calls = _calls(conn, episode_id) if with_calls else []
    num_calls = len(calls) if with_calls else conn.execute(
        "SELECT COUNT(*) FROM calls WHERE episode_id=?", (episode_id,)
    ).fetchone()[0]
    return episode_from_row(row, calls, num_calls, _model_rewards(conn, episode_id))


def _model_rewards(conn: sqlite3.Connection, episode_id: str) -> dict[str, float]:
    rows = conn.execute(
        "SELECT model, reward FROM episode_models WHERE episode_id=? AND reward IS NOT NULL",
        (episode_id,),
    ).fetchall()
    return {model: reward for model, reward in rows}


def _calls(conn: sqlite3.Connection, episode_id: str) -> list[CallRecord]:
    rows = conn.execute(
        f"SELECT {CALL_COLUMNS} FROM calls WHERE episode_id=? ORDER BY seq", (episode_id,)
    ).fetchall()
    return [call_from_row(r) for r in rows]
