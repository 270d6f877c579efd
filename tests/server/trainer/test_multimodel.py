"""Two trainable models fed by the same episodes: per-model rewards, batch rules and
policy versions, through the real gRPC server and the SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import swarmrl
from swarmrl_server.app import RunningServer
from swarmrl_server.config import ModelSpec
from swarmrl_server.trainer.config import TrainerConfigError
from swarmrl_server.trainer.setup import options_per_model
from tests.helpers import assert_eventually, wait_for_step
from tests.server_fixtures import ServerFactory

SAMPLING: dict[str, Any] = {"max_tokens": 3, "temperature": 1.0}


@pytest.fixture
async def two_models(make_server: ServerFactory) -> RunningServer:
    """Proposer and solver (both tiny, both trained), each with its own batch size."""
    return await make_server(
        models=(ModelSpec("proposer", "tiny"), ModelSpec("solver", "tiny:1")),
        train={"progress": "false", "checkpoint_every": "0", "checkpoint_on_stop": "false",
               "group_size": "2", "batch_rule": "episodes", "lr": "1e-3",
               "max_staleness": "8", "proposer.batch_size": "4", "solver.batch_size": "2",
               "proposer.weight_sync": "wait"})


def metrics(data_dir: Path, model: str) -> list[dict[str, Any]]:
    lines = (data_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["model"] == model]


async def test_per_model_rewards_reach_only_their_models_trainer(two_models: RunningServer) -> None:
    swarm = two_models.swarm
    proposer, solver = swarm.models["proposer"].trainer, swarm.models["solver"].trainer
    config = swarmrl.ClientConfig(target=two_models.grpc_target, agent_version="v1")
    # (task, episode reward = solver's, proposer's own reward)
    plays = [("t1", 0.2, 1.0), ("t1", 0.4, 0.0), ("t2", 0.6, 0.9), ("t2", 0.8, 0.3)]
    async with swarmrl.AsyncSwarmClient(config=config) as client:
        for task, reward, proposer_reward in plays:
            ep = await client.start_episode(task, models=["proposer", "solver"])
            await ep.chat([{"role": "user", "content": "ask"}], model="proposer", **SAMPLING)
            for _ in range(2):
                await ep.chat([{"role": "user", "content": "solve"}], model="solver", **SAMPLING)
            if task == "t1":  # given early, by SubmitReward
                await ep.reward(proposer_reward, model="proposer")
                info = await ep.end(reward)
            else:  # given at the end
                info = await ep.end(reward, model_rewards={"proposer": proposer_reward})
            assert info.model_rewards == {"proposer": proposer_reward}
            assert info.agent_version == "v1"  # the session's version, not given per episode
        # Two episodes that name the proposer but only call the solver: the proposer's
        # trainer gets nothing from them (counted), the solver trains them.
        for reward in (0.1, 0.5):
            ep = await client.start_episode("t3", models=["proposer", "solver"])
            await ep.chat([{"role": "user", "content": "solve"}], model="solver", **SAMPLING)
            await ep.end(reward)
        with pytest.raises(swarmrl.InvalidArgumentError, match="model_rewards"):
            ep = await client.start_episode("t4", models=["solver"])
            await ep.end(1.0, model_rewards={"proposer": 1.0})  # not a model of the episode
        await ep.abort("test over")

    await wait_for_step(solver, 3, timeout=60)
    await wait_for_step(proposer, 1, timeout=60)
    await assert_eventually(lambda: _check(proposer.not_called == 2 and proposer.pending == 0))
    data_dir = swarm.data_dir
    assert data_dir is not None
    (p_step,) = metrics(data_dir, "proposer")
    s_steps = metrics(data_dir, "solver")
    assert len(s_steps) == 3
    # The proposer trained the 4 episodes that called it, once each, on its own rewards.
    assert p_step["reward/episodes"] == 4 and p_step["merge/calls"] == 4
    assert p_step["reward/t1/mean"] == pytest.approx(0.5)
    assert p_step["reward/t2/mean"] == pytest.approx(0.6)
    assert "reward/t3/mean" not in p_step
    assert await swarm.store.queued_not_called("proposer") == 2  # durable, counted at restart
    assert await swarm.store.queued_not_called("solver") == 0
    # The solver trained all 6 in batches of 2 (its own rule) on the episode rewards,
    # and only its own calls (two per episode in t1/t2, one in t3).
    assert [s["reward/episodes"] for s in s_steps] == [2, 2, 2]
    assert sum(s["merge/calls"] for s in s_steps) == 4 * 2 + 2
    by_task: dict[str, list[float]] = {}
    for s in s_steps:
        for task in ("t1", "t2", "t3"):
            if f"reward/{task}/mean" in s:
                by_task.setdefault(task, []).append(s[f"reward/{task}/mean"])
    assert by_task["t1"] == [pytest.approx(0.3)]
    assert by_task["t2"] == [pytest.approx(0.7)]
    assert by_task["t3"] == [pytest.approx(0.3)]
    # Each model's policy version moved with its own steps only.
    assert swarm.models["proposer"].engine.policy_version == 1
    assert swarm.models["solver"].engine.policy_version == 3


def _check(condition: bool) -> None:
    assert condition


async def test_weight_sync_auto_resolves_to_the_engines_default(two_models: RunningServer
                                                                ) -> None:
    """The solver names no weight_sync: it gets the hf engine's measured default, and the
    trainer's config file (what run cards record) holds the resolved value, not "auto"."""
    data = two_models.swarm.data_dir
    recorded = {m: json.loads((data / f"trainer-config-{m}.json").read_text())["weight_sync"]
                for m in ("proposer", "solver")}
    hf_default = two_models.swarm.models["solver"].engine.weight_sync_default
    assert recorded == {"proposer": "wait", "solver": hf_default} and hf_default == "interrupt"


def test_per_model_train_options_are_checked() -> None:
    per_model = options_per_model({"lr": "1e-4", "solver.lr": "1e-3"}, ["proposer", "solver"])
    assert per_model == {"proposer": {"lr": "1e-4"}, "solver": {"lr": "1e-3"}}
    with pytest.raises(TrainerConfigError, match="names model 'judge'"):
        options_per_model({"judge.lr": "1e-3"}, ["proposer", "solver"])
    with pytest.raises(TrainerConfigError, match="batch_size"):
        options_per_model({"solver.batch_size": "0"}, ["proposer", "solver"])
