"""The trainers' ledger: which ended episodes wait for a model's trainer, and which step
consumed which (kept per model, and append-only in `consumed_log`)."""

from __future__ import annotations

from collections.abc import Iterable

from swarmrl_server.store.core import StoreCore
from swarmrl_server.store.episodes import read_episode
from swarmrl_server.store.records import EpisodeRecord, EpisodeState


class LedgerQueries(StoreCore):
    """The `consumed` and `consumed_log` tables, over the queue in `episode_models`."""

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
            return [read_episode(self.conn, row, True) for row in rows]

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
        await self._write(
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
        await self._write(
            lambda c: c.execute(
                "DELETE FROM consumed WHERE model=? AND step>?", (model, step)
            ),
        )

    async def consumed_after(self, model: str, step: int) -> tuple[int, int]:
        """(episodes consumed by steps after `step`, the highest such step or `step`)."""
        def _count() -> tuple[int, int]:
            n, top = self.conn.execute(
                "SELECT COUNT(*), MAX(step) FROM consumed WHERE model=? AND step>?",
                (model, step)).fetchone()
            return int(n), int(top if top is not None else step)

        return await self._run(_count)
