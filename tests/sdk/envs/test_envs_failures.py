"""The runner against failures, on a real in-process server and the tiny model: failures
count (by kind, in every denominator), errors that recur stop the run at once with their
item, the server's transient errors cost a rollout and never the run, and nothing an
environment does blocks the event loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

import swarmrl
from swarmrl._errors import DeadlineExceededError, UnavailableError
from swarmrl.envs import (
    Item,
    Outcome,
    PolicyError,
    Rollout,
    RolloutRecord,
    Runner,
    RunnerConfig,
    RunStopped,
    Split,
)
from tests.envs_support import Scripted


def _config(**changes: Any) -> RunnerConfig:
    return RunnerConfig(**{"group_size": 2, "concurrency": 4, "progress": False, **changes})


async def _states(target: str, ids: list[str]) -> dict[str, swarmrl.EpisodeInfo]:
    async with swarmrl.AsyncSwarmClient(target) as client:
        return {i: await client.get_episode(i) for i in ids}


# -- failures count -----------------------------------------------------------------------


async def test_a_policy_error_is_trained_with_its_reward(http_server: Any) -> None:
    """The environment rejects the model's output (PolicyError): the rollout's episode is
    ended with the error's reward, its group trains, and the report counts it."""

    async def act(rollout: Rollout) -> None:
        if rollout.item.data["i"] % 2:
            raise PolicyError("not a valid move", reward=-1.0)

    env = Scripted(act, n_train=2)
    records: list[RolloutRecord] = []
    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        async with Runner(env, client, _config(seed=1), on_record=records.append) as runner:
            report = await runner.train(groups=2)
    assert report.groups == 2 and report.groups_aborted == 0
    assert report.errors == {"policy": 2} and report.failed_attempts == 0
    rejected = [r for r in records if r.item_id == "t1"]
    assert len(rejected) == 2 and all(
        r.trained and r.reward == -1.0 and r.kind == "policy" and "not a valid move" in r.error
        for r in rejected)
    infos = await _states(http_server.grpc_target, [r.episode_id for r in records])
    assert all(infos[r.episode_id].state == "ended" for r in records)
    assert {infos[r.episode_id].reward for r in rejected} == {-1.0}
    assert len(env.episodes) == 4  # never retried
    assert report.as_dict()["errors"] == {"policy": 2}


async def test_evaluation_counts_timeouts_and_policy_errors_in_its_denominator(
        http_server: Any) -> None:
    """Of 4 val items one times out and one is rejected (PolicyError): n is 4, the timed-out
    one failed (not solved, reward 0 in the mean), the rejected one is not solved; neither
    is retried (a second chance would flatter the policy)."""

    async def act(rollout: Rollout) -> Outcome | None:
        if rollout.item.id == "v1":
            await asyncio.Event().wait()  # the model's output sent it into a loop
        if rollout.item.id == "v2":
            raise PolicyError("unparseable answer")
        return Outcome(reward=1.0, success=True)

    env = Scripted(act)
    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        async with Runner(env, client, _config(rollout_timeout_s=1.0, retries=2)) as runner:
            report = await runner.evaluate("val")
    figures = report.as_dict()
    assert figures["n"] == 4 and figures["failed"] == 1
    assert figures["errors"] == {"timeout": 1, "policy": 1}
    assert figures["solved"] == 2 and figures["success_rate"] == 0.5
    assert figures["mean_reward"] == 0.5  # (1 + 0 + 0 + 1) / 4: the failed one scores 0
    assert len(env.episodes) == 4
    assert "1 failed" in str(report) and "timeout 1" in str(report)
    timed_out = next(r for r in report.records if r.item_id == "v1")
    assert timed_out.kind == "timeout" and timed_out.reward is None
    infos = await _states(http_server.grpc_target, env.episodes)
    assert all(i.state == "aborted" for i in infos.values())


# -- fail fast ----------------------------------------------------------------------------


async def test_a_type_error_in_play_stops_the_run_at_once_aborting_its_siblings(
        http_server: Any) -> None:
    """One rollout raises TypeError while its siblings (and the next group's) wait for
    ever: the run stops within seconds with that error and its item, every episode it
    opened aborted, none left open on the server."""
    others_waiting, raised = asyncio.Event(), False
    waiting = 0

    async def act(rollout: Rollout) -> None:
        nonlocal waiting, raised
        if rollout.item.id == "t1":  # once t0's group all wait, one of t1's raises
            await others_waiting.wait()
            if not raised:
                raised = True
                raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")
        else:
            waiting += 1
            if waiting == 3:
                others_waiting.set()
        await asyncio.Event().wait()

    env = Scripted(act, n_train=2)
    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        async with Runner(env, client, _config(group_size=3, concurrency=8, seed=0,
                                               retries=3)) as runner:
            t0 = time.monotonic()
            with pytest.raises(RunStopped) as stopped:
                await asyncio.wait_for(runner.train(groups=2), 60)
            assert time.monotonic() - t0 < 30
        err = stopped.value
        assert isinstance(err.cause, TypeError) and err.item.id == "t1" and err.split == "train"
        assert "'t1'" in str(err) and "train" in str(err) and "TypeError" in str(err)
        assert (await client.status()).open_episodes == 0  # aborted by the runner itself
    infos = await _states(http_server.grpc_target, env.episodes)
    assert len(infos) >= 4 and all(i.state == "aborted" for i in infos.values())


async def test_an_invalid_argument_from_the_server_stops_the_run(http_server: Any) -> None:
    """A bad option the server refuses (INVALID_ARGUMENT) would be refused on every
    rollout: the run stops on the first, naming it."""

    async def act(rollout: Rollout) -> None:
        await rollout.chat([{"role": "user", "content": "hi"}], max_tokens=2, temperature=-1.0)

    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        async with Runner(Scripted(act), client, _config()) as runner:
            with pytest.raises(RunStopped, match="INVALID_ARGUMENT") as stopped:
                await asyncio.wait_for(runner.evaluate("val"), 60)
    assert isinstance(stopped.value.cause, swarmrl.InvalidArgumentError)
    assert stopped.value.split == "val"


async def test_consecutive_failures_stop_the_run(http_server: Any) -> None:
    """An environment that fails every rollout (its own bug, not a recurring type) stops
    the run after max_consecutive_failures rollouts, each retried first; with the limit
    off, its groups are aborted and counted."""

    async def act(rollout: Rollout) -> None:
        raise RuntimeError("the sandbox is gone")

    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        env = Scripted(act)
        async with Runner(env, client, _config(
                group_size=1, concurrency=1, max_consecutive_failures=3)) as runner:
            with pytest.raises(RunStopped, match="3 rollouts in a row failed.*sandbox is gone"):
                await asyncio.wait_for(runner.train(groups=100), 60)
        assert len(env.episodes) >= 6  # 3 rollouts, 2 attempts each (and one more begun)
        assert (await client.status()).open_episodes == 0
        async with Runner(Scripted(act), client, _config(
                group_size=1, max_consecutive_failures=0)) as runner:
            report = await runner.train(groups=3)
    assert report.groups_aborted == 3 and report.errors == {"environment": 6}


# -- the server is remote -----------------------------------------------------------------


async def test_transient_server_errors_cost_an_attempt_not_the_run(http_server: Any) -> None:
    """UNAVAILABLE (past the SDK's own retries) from StartEpisode, DEADLINE_EXCEEDED from
    the evaluation's GetEpisode: each fails one attempt, which is retried as a fresh
    episode; the run goes on and reports them as the server's."""
    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        real_start, real_get = client.start_episode, client.get_episode
        failures = {"start": 1, "get": 1}

        async def start_episode(*args: Any, **kwargs: Any) -> Any:
            if failures["start"]:
                failures["start"] -= 1
                raise UnavailableError("the server is restarting")
            return await real_start(*args, **kwargs)

        async def get_episode(*args: Any, **kwargs: Any) -> Any:
            if failures["get"]:
                failures["get"] -= 1
                raise DeadlineExceededError("too slow")
            return await real_get(*args, **kwargs)

        client.start_episode = start_episode  # type: ignore[method-assign]
        client.get_episode = get_episode  # type: ignore[method-assign]
        env = Scripted()
        async with Runner(env, client, _config()) as runner:
            train = await runner.train(groups=2)
            val = await runner.evaluate("val")
        assert (await client.status()).open_episodes == 0
    assert train.groups == 2 and train.errors == {"server": 1}
    assert val.as_dict()["n"] == 4 and val.as_dict()["failed"] == 0
    assert val.errors == {"server": 1}


# -- nothing blocks the loop --------------------------------------------------------------


async def test_a_slow_items_does_not_stop_the_loop(http_server: Any) -> None:
    """items() that sleeps 2 s (a game compiled, a file read) runs in a worker thread: a
    ticker on the event loop keeps ticking meanwhile, for every split."""
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    during: dict[str, int] = {}

    class Slow(Scripted):
        def items(self, split: Split) -> list[Item]:
            before = ticks
            time.sleep(2.0)
            during[split] = ticks - before
            return super().items(split)

    task = asyncio.create_task(ticker())
    try:
        async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
            async with Runner(Slow(), client, _config()) as runner:
                await runner.train(groups=1)
    finally:
        task.cancel()
    assert set(during) == {"train", "val", "test"}
    assert all(n >= 10 for n in during.values()), during  # ~40 each; 0 on a blocked loop


async def test_a_train_stream_of_held_out_items_fails_instead_of_spinning(
        http_server: Any) -> None:
    class Leaky(Scripted):
        def items(self, split: Split) -> Any:
            if split != "train":
                return super().items(split)
            return (Item(f"copy{i}", {"split": "val", "i": i % 4}) for i in range(10**9))

    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        async with Runner(Leaky(), client, _config()) as runner:
            with pytest.raises(ValueError, match="10000 items in a row.*val or test"):
                await asyncio.wait_for(runner.train(groups=1), 60)


async def test_a_finite_train_generator_is_cycled(http_server: Any) -> None:
    calls = 0

    class Generated(Scripted):
        def items(self, split: Split) -> Any:
            nonlocal calls
            if split != "train":
                return super().items(split)
            calls += 1
            return (Item(f"t{i}", {"split": "train", "i": i}) for i in range(2))

    records: list[RolloutRecord] = []
    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        async with Runner(Generated(), client, _config(group_size=1),
                          on_record=records.append) as runner:
            report = await runner.train(groups=5)
    assert report.groups == 5 and calls == 3  # three passes, each asked for anew
    assert [r.item_id for r in records].count("t0") == 3


async def test_to_thread_plays_get_a_thread_per_rollout(http_server: Any) -> None:
    """12 rollouts that each block a thread until all 12 are blocked: the interpreter's
    default executor (cpu + 4 threads: 6 on 2 cores) would never let them meet."""
    barrier = threading.Barrier(12, timeout=30)

    async def act(rollout: Rollout) -> None:
        await asyncio.to_thread(barrier.wait)

    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        async with Runner(Scripted(act, n_train=1), client,
                          _config(group_size=12, concurrency=12)) as runner:
            report = await runner.train(groups=1)
    assert report.groups == 1 and report.errors == {}

