"""What the environment examples' tests read back from a run's server."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import swarmrl


def episode_states(target: str, episode_ids: list[str]) -> dict[str, tuple[str, float | None, int]]:
    """Each episode's state, reward and number of calls, through the SDK."""

    async def fetch() -> dict[str, tuple[str, float | None, int]]:
        async with swarmrl.AsyncSwarmClient(target) as client:
            infos = [await client.get_episode(i) for i in episode_ids]
        return {i.episode_id: (i.state, i.reward, i.num_calls) for i in infos}

    return asyncio.run(fetch())


def trained_episode_ids(data_dir: Path) -> set[str]:
    """Episodes a trainer consumed (the store's ``consumed`` table)."""
    uri = f"file:{data_dir / 'swarm.sqlite3'}?mode=ro"
    with sqlite3.connect(uri, uri=True) as db:
        return {row[0] for row in db.execute("SELECT episode_id FROM consumed")}


def read_rollouts(out: Path) -> list[dict]:
    """The rollout records a `swarmrl train` / `swarmrl eval` run wrote (``rollouts.jsonl``)."""
    import json

    return [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]


def stored_calls(data_dir: Path) -> dict[str, list]:
    """Every episode's recorded calls, from the store (what the trainer merges)."""
    from swarmrl_server.store.records import EpisodeState
    from swarmrl_server.store.sqlite import SqliteStore

    async def collect() -> dict[str, list]:
        store = SqliteStore(data_dir / "swarm.sqlite3")
        await store.open()
        try:
            out = {}
            for state in (EpisodeState.ENDED, EpisodeState.ABORTED):
                for episode in await store.list_episodes(state, with_calls=True):
                    out[episode.episode_id] = list(episode.calls)
            return out
        finally:
            await store.close()

    return asyncio.run(collect())
