"""Mixed tasks: per-task quotas in each batch (waiting or filling when a task is short),
and per-task and per-agent-version metrics every step."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmrl_server.store.records import EpisodeRecord
from swarmrl_server.swarm import Swarm
from swarmrl_server.trainer.batching import Batcher
from swarmrl_server.trainer.config import TrainerConfig, TrainerConfigError
from tests.helpers import wait_for_step
from tests.trainer_support import (
    group_of,
    insert_episodes,
    make_episode,
    metrics,
    open_swarm,
    train,
)


def batcher(**options: str) -> Batcher:
    return Batcher(TrainerConfig.from_options(options))


def singles(task: str, n: int, t0: float, step: float) -> list[EpisodeRecord]:
    return [make_episode(f"{task}-{t0 + i * step}", float(i % 2), [], task_id=task,
                         group_id=f"{task}-{i}", end_time=t0 + i * step) for i in range(n)]


def test_quotas_follow_the_weights() -> None:
    assert TrainerConfig.from_options(
        {"task_mix": "math:2,code:1", "batch_size": "6"}).task_quotas() == {"math": 4, "code": 2}
    assert TrainerConfig.from_options(
        {"task_mix": "a:1,b:1,c:1", "batch_size": "4"}).task_quotas() == {"a": 2, "b": 1, "c": 1}
    for bad in ("math", "math:0", "math:x", "a:1,a:2"):
        with pytest.raises(TrainerConfigError, match="task_mix"):
            TrainerConfig.from_options({"task_mix": bad})
    with pytest.raises(TrainerConfigError, match="no place"):
        TrainerConfig.from_options({"task_mix": "a:10,b:1", "batch_size": "2"})
    with pytest.raises(TrainerConfigError, match="clients"):
        TrainerConfig.from_options({"task_mix": "a:1", "batch_rule": "clients"})


def test_a_short_task_waits_or_is_filled() -> None:
    # math arrives three times as fast as code; the mix asks for 2:1.
    pending = singles("math", 9, 0.0, 1.0) + singles("code", 1, 0.5, 1.0)
    options = {"task_mix": "math:2,code:1", "batch_size": "6", "group_size": "1"}
    assert batcher(**options).plan(pending) is None  # code has 1 of its 2: wait
    plan = batcher(**options, task_mix_short="fill").plan(pending)
    assert plan is not None
    tasks = [e.task_id for e in plan.episodes]
    assert tasks.count("math") == 5 and tasks.count("code") == 1  # math fills code's place
    pending += singles("code", 1, 100.0, 1.0)
    plan = batcher(**options).plan(pending)
    assert plan is not None and [e.task_id for e in plan.episodes].count("code") == 2
    assert [e.task_id for e in plan.episodes].count("math") == 4


async def test_task_mix_is_honoured_over_a_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    # Groups arrive math, math, math, code, ... (3:1) and the mix asks for 2:1. Without
    # the mix, oldest-first batches would be 3:1.
    swarm: Swarm = await open_swarm(tmp_path / "data", tiny_model_dir)
    try:
        episodes: list[EpisodeRecord] = []
        for k in range(24):
            task = "code" if k % 4 == 3 else "math"
            group = group_of(f"{task}{k}-", [1.0, 0.0] if k % 2 else [0.0, 0.5],
                             group_id=f"g{k}", t0=10.0 * k, seed=k, task_id=task)
            for e in group:
                e.agent_version = "v2" if k >= 12 else "v1"
            episodes += group
        await insert_episodes(swarm.store, episodes)
        trainer = await train(swarm, task_mix="math:2,code:1", batch_size="3",
                              checkpoint_every="0", max_staleness="100")
        await wait_for_step(trainer, 6, timeout=120)
    finally:
        await swarm.stop()
    steps = metrics(tmp_path / "data")[:6]
    math_n = sum(s.get("task/math/episodes", 0) for s in steps)
    code_n = sum(s.get("task/code/episodes", 0) for s in steps)
    assert math_n + code_n == 6 * 3 * 2
    assert abs(math_n / (math_n + code_n) - 2 / 3) <= 0.1 * 2 / 3
    for s in steps:
        assert {"task/math/reward_mean", "task/math/length_mean", "task/math/stale_mean",
                "task/code/reward_mean", "task/code/dropped"} <= set(s)
        assert s["task/math/length_mean"] > 0
    # Split by agent version too: the first groups came from v1, the later from v2.
    assert steps[0]["agent/v1/episodes"] == 6 and "agent/v2/episodes" not in steps[0]
    assert sum(s.get("agent/v1/episodes", 0) + s.get("agent/v2/episodes", 0) for s in steps) == 36
