"""History never rewinds: after a crash the trainer continues from its latest
checkpoint (also on a plain restart), issues versions above every version ever
issued, numbers steps above every step ever taken, trains the lost step's episodes
again once and counts them, and drops (or trains off-policy) calls of lost weights.

A crash is a stop with no final checkpoint: the store and checkpoints are exactly what
a SIGKILL leaves (every commit is durable before the call that made it returns).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import wait_for_step
from tests.trainer_support import MODEL, group_of, insert_episodes, metrics, open_swarm, train

CRASHY = {"checkpoint_every": "2", "checkpoint_on_stop": "false", "max_staleness": "100"}


async def _crashed_after_three_steps(data: Path, tiny_model_dir: Path) -> None:
    """Steps 1-3 trained (versions 1-3 issued), checkpoint at step 2, then a crash."""
    swarm = await open_swarm(data, tiny_model_dir)
    try:
        await insert_episodes(swarm.store, [
            *group_of("a", [1.0, 0.0], group_id="a", t0=0),
            *group_of("b", [0.0, 1.0], group_id="b", t0=10),
            *group_of("c", [1.0, 0.0], group_id="c", t0=20)])
        trainer = await train(swarm, **CRASHY)
        await wait_for_step(trainer, 3)
    finally:
        await swarm.stop()


@pytest.mark.parametrize("lost_weights", ["drop", "offpolicy"])
async def test_a_plain_restart_never_rewinds(tmp_path: Path, tiny_model_dir: Path,
                                             lost_weights: str) -> None:
    data = tmp_path / "data"
    await _crashed_after_three_steps(data, tiny_model_dir)
    swarm = await open_swarm(data, tiny_model_dir)
    try:
        # Episodes made while it was down: "d" by weights of version 3 (lost with the
        # crash), "e" by the checkpoint's version 2 (still named by it).
        await insert_episodes(swarm.store, [
            *group_of("d", [1.0, 0.0], group_id="d", t0=30, version=3, seed=3),
            *group_of("e", [0.0, 1.0], group_id="e", t0=40, version=2, seed=4)])
        trainer = await train(swarm, **{**CRASHY, "lost_weights": lost_weights})  # no resume
        assert (trainer.step, trainer.policy_version) == (3, 2)  # step-2's weights, step 3 lost
        await wait_for_step(trainer, 5 if lost_weights == "drop" else 6)
        versions = await swarm.store.issued_versions(MODEL)
        consumed = await swarm.store.consumed_episodes(MODEL)
    finally:
        await swarm.stop()

    numbers = [v for v, _, _ in versions]
    assert numbers == sorted(set(numbers)), "a version number was issued twice"
    assert [(v, lost) for v, _, lost in versions][:3] == [(1, False), (2, False), (3, True)]
    assert min(numbers[3:]) == 4  # new weights start above everything ever issued
    records = metrics(data)
    steps = [r["step"] for r in records]
    assert steps == sorted(set(steps)) and steps[:3] == [1, 2, 3]
    first_after = records[3]
    assert first_after["recovery/lost_steps"] == 1.0
    assert (first_after["recovery/lost_steps_from"], first_after["recovery/lost_steps_to"]) == (3, 3)
    assert first_after["recovery/retrained_episodes"] == 2.0  # "c", trained again once
    assert consumed["c0"] > 3 and consumed["c1"] > 3
    assert consumed["a0"] == 1 and consumed["b0"] == 2  # kept: the checkpoint has them
    if lost_weights == "drop":
        assert records[-1]["drop/total_lost_weights"] == 2.0  # "d" was made by lost weights
    else:
        assert records[-1]["recovery/offpolicy_episodes"] == 2.0
    assert all(e in consumed for e in ("d0", "d1", "e0", "e1"))
