"""Reading back what a server stored: from a running server (in process), or from the
SQLite store in the data dir of a stopped one (a `swarmrl serve` / `swarmrl train`
child process)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from swarmrl_server.security import IN_PROCESS


async def stored_episode(running: Any, episode_id: str) -> Any:
    """The episode's record in a running server's store, with its calls."""
    return await running.swarm.episodes.get(episode_id, with_calls=True, caller=IN_PROCESS)


async def stored_calls(running: Any, episode_id: str) -> list[Any]:
    """The episode's calls in a running server's store, in order."""
    record = await stored_episode(running, episode_id)
    return sorted(record.calls, key=lambda c: c.seq)


def stored_episodes(data_dir: Path) -> dict[str, Any]:
    """Every episode in a stopped server's store (any state), with its calls, by id."""
    from swarmrl_server.store.records import EpisodeState
    from swarmrl_server.store.sqlite import SqliteStore

    async def read() -> dict[str, Any]:
        store = SqliteStore(data_dir / "swarm.sqlite3")
        await store.open()
        try:
            return {e.episode_id: e for state in EpisodeState
                    for e in await store.list_episodes(state, with_calls=True)}
        finally:
            await store.close()

    return asyncio.run(read())


def trained_episode_ids(data_dir: Path) -> set[str]:
    """Episodes a trainer consumed (the store's ``consumed`` table)."""
    uri = f"file:{data_dir / 'swarm.sqlite3'}?mode=ro"
    with sqlite3.connect(uri, uri=True) as db:
        return {row[0] for row in db.execute("SELECT episode_id FROM consumed")}
