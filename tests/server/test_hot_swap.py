"""Hot swap: a client replaced mid-run by an edited one (a new agent version) while the
server trains. No episode is lost, both versions are recorded per episode, reported by
ListClients and `swarmrl status`, and split in the step metrics."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import swarmrl
from swarmrl import _cli
from swarmrl_server.app import RunningServer
from tests.helpers import assert_eventually, wait_for_step
from tests.server_fixtures import ServerFactory


@pytest.fixture
async def training_server(make_server: ServerFactory) -> RunningServer:
    return await make_server(train={
        "progress": "false", "checkpoint_every": "0", "checkpoint_on_stop": "false",
        "group_size": "2", "batch_rule": "episodes", "batch_size": "2", "max_staleness": "100"})


async def play(client: swarmrl.AsyncSwarmClient, n: int, reward: float) -> list[str]:
    ids = []
    for i in range(n):
        async with client.episode(f"task{i // 2}", models=["tiny"]) as ep:
            await ep.chat([{"role": "user", "content": f"hi {i}"}], max_tokens=3)
            await ep.reward(reward if i % 2 else 0.0)
        ids.append(ep.id)
    return ids


async def test_client_swapped_mid_run(
    training_server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    target = training_server.grpc_target
    trainer = training_server.swarm.models["tiny"].trainer
    config = swarmrl.ClientConfig(target=target, client_name="agent-v1", agent_version="v1")
    async with swarmrl.AsyncSwarmClient(config=config) as old:
        first = await play(old, 4, 1.0)
        listing = await old.list_clients()
        (live,) = listing.clients
        assert (live.client_name, live.agent_version) == ("agent-v1", "v1")
        assert live.episode_agent_versions == ["v1"] and live.models == ["tiny"]
        assert live.tasks == ["task0", "task1"] and live.ended_episodes == 4
        await wait_for_step(trainer, 1, timeout=60)  # training is under way
    # The old client is gone; the edited one attaches while the trainer keeps going.
    config = swarmrl.ClientConfig(target=target, client_name="agent-v2", agent_version="v2")
    async with swarmrl.AsyncSwarmClient(config=config) as new:
        second = await play(new, 4, 0.5)
        listing = await new.list_clients()
        assert [c.client_name for c in listing.clients] == ["agent-v2"]
        versions = {v.agent_version: v for v in listing.agent_versions}
        assert set(versions) == {"v1", "v2"}
        assert versions["v1"].ended_episodes == 4 and versions["v2"].ended_episodes == 4
        assert versions["v1"].mean_reward == pytest.approx(0.5)
        assert versions["v2"].mean_reward == pytest.approx(0.25)
        # (on a thread: the server serves on this test's event loop)
        assert await asyncio.to_thread(_cli.main, ["status", "--target", target]) == 0
        out = capsys.readouterr().out
        assert "agent-v2" in out and "v1" in out and "v2" in out
        # Nothing lost: every episode of both clients is ended, and all get trained.
        for episode_id in first + second:
            info = await new.get_episode(episode_id)
            assert info.state == "ended"
            assert info.agent_version == ("v1" if episode_id in first else "v2")
        await assert_eventually(lambda: _all_consumed(trainer), timeout=60)
        listing = await new.list_clients()
        assert {v.agent_version: v.consumed_episodes for v in listing.agent_versions} == {
            "v1": 4, "v2": 4}
    data_dir = training_server.swarm.data_dir
    assert data_dir is not None
    rows = [json.loads(line) for line in (data_dir / "metrics.jsonl").read_text().splitlines()]
    per_version: dict[str, float] = {}
    for row in rows:
        for version in ("v1", "v2"):
            per_version[version] = per_version.get(version, 0) + row.get(
                f"agent/{version}/episodes", 0)
    assert per_version == {"v1": 4, "v2": 4}
    assert any("agent/v2/reward_mean" in row for row in rows)


def _all_consumed(trainer: Any) -> None:
    assert trainer.step == 4 and trainer.pending == 0
