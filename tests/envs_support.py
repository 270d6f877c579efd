"""What the environment examples' tests read back from a run: its episodes through the SDK,
its rollout records. (Its store: tests/store_support.py.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import swarmrl


def episode_states(target: str, episode_ids: list[str]) -> dict[str, tuple[str, float | None, int]]:
    """Each episode's state, reward and number of calls, through the SDK."""

    async def fetch() -> dict[str, tuple[str, float | None, int]]:
        async with swarmrl.AsyncSwarmClient(target) as client:
            infos = [await client.get_episode(i) for i in episode_ids]
        return {i.episode_id: (i.state, i.reward, i.num_calls) for i in infos}

    return asyncio.run(fetch())


def read_rollouts(out: Path) -> list[dict]:
    """The rollout records a `swarmrl train` / `swarmrl eval` run wrote (``rollouts.jsonl``)."""
    import json

    return [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
