"""The runner's holds and groups against a real in-process server (the tiny model): a
runner with a holder id re-adopts its run's hold instead of stacking one, a group_size
other than the trainer's is refused, and the version check of a pinned evaluation counts
the evaluated model's calls only."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import swarmrl
from swarmrl.envs import Runner, RunnerConfig
from tests.envs_support import Scripted
from tests.server_fixtures import ServerFactory

TRAIN = {"batch_rule": "groups", "group_size": "2", "batch_size": "1", "progress": "false",
         "checkpoint_every": "0", "checkpoint_on_stop": "false"}


async def test_a_runner_with_a_holder_releases_its_earlier_hold_and_holds_as_it(
        make_server: ServerFactory) -> None:
    """A resumed run's runner (the holder its run folder names) finds the hold its first
    life took: it releases it on start, and its own evaluations hold as the same holder,
    bound to its own session; never two holds."""
    running = await make_server(train=TRAIN)
    async with swarmrl.AsyncSwarmClient(running.grpc_target) as earlier, \
            swarmrl.AsyncSwarmClient(running.grpc_target) as client:
        await earlier.hold_training(holder="run-7f3a", reason="val evaluation before")
        assert [h.holder for h in (await client.status()).holds] == ["run-7f3a"]
        config = RunnerConfig(group_size=2, holder="run-7f3a", progress=False)
        async with Runner(Scripted(), client, config) as runner:
            assert (await client.status()).holds == []
            async with runner.pinned("val evaluation"):
                holds = (await client.status()).holds
                assert [(h.holder, h.session_id) for h in holds] == [
                    ("run-7f3a", client.session_id)]
            assert (await client.status()).holds == []


async def test_a_group_size_other_than_the_trainers_is_refused(
        make_server: ServerFactory) -> None:
    running = await make_server(train=TRAIN)
    async with swarmrl.AsyncSwarmClient(running.grpc_target) as client:
        env = Scripted()
        async with Runner(env, client, RunnerConfig(group_size=3, progress=False)) as runner:
            with pytest.raises(ValueError, match=r"group_size is 3.*'tiny' groups 2"):
                await runner.train(groups=1)
        assert env.episodes == []  # refused before the first rollout
        async with Runner(env, client, RunnerConfig(group_size=2, progress=False)) as runner:
            assert (await runner.train(groups=1)).groups == 1


async def test_a_judges_calls_are_not_strays_of_a_pinned_evaluation(http_server: Any) -> None:
    """An evaluation's episodes may call another model (a judge) at its own version: the
    pinned evaluation counts the evaluated model's calls only."""
    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        real_get = client.get_episode

        async def get_episode(episode_id: str, **kwargs: Any) -> swarmrl.EpisodeInfo:
            info = await real_get(episode_id, **kwargs)
            judged = dataclasses.replace(info.calls[0], call_id="judge-call", model="judge",
                                         policy_version=41, version_spans=((41, 0, 1),))
            return dataclasses.replace(info, calls=[*info.calls, judged])

        client.get_episode = get_episode  # type: ignore[method-assign]
        async with Runner(Scripted(), client, RunnerConfig(progress=False)) as runner:
            report = await runner.evaluate("val")
    assert report.policy_versions == [0] == [report.pinned_version]
