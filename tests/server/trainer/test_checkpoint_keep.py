"""Checkpoints kept: automatic retention (keep_checkpoints) never counts or removes one a
client saved (SaveCheckpoint marks it, durably: a restarted server still knows), and
DeleteCheckpoint removes one on request, never the newest and nothing outside the model's
checkpoints."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import pytest

import swarmrl
from swarmrl_server.errors import SwarmError
from swarmrl_server.trainer import checkpoint
from tests.helpers import assert_eventually, wait_for_step
from tests.server_fixtures import ServerFactory

TRAIN = {"batch_rule": "groups", "group_size": "2", "batch_size": "1", "lr": "1e-3",
         "checkpoint_every": "1", "keep_checkpoints": "1", "checkpoint_on_stop": "false",
         "progress": "false"}


def fake_steps(root: Path, steps: list[int]) -> None:
    for n in steps:
        (root / f"step-{n}").mkdir(parents=True)
        (root / f"step-{n}" / checkpoint.STATE_FILE).write_text(json.dumps({"step": n}))


def steps_in(root: Path) -> list[int]:
    return [n for n, _ in checkpoint.list_steps(root)]


def test_pruning_skips_kept_checkpoints_and_counts_only_the_others(tmp_path: Path) -> None:
    fake_steps(tmp_path, [1, 2, 3, 4, 5])
    checkpoint.mark_kept(tmp_path / "step-1")
    checkpoint.mark_kept(tmp_path / "step-3")
    checkpoint.prune(tmp_path, keep=1)
    assert steps_in(tmp_path) == [1, 3, 5]
    assert checkpoint.is_kept(tmp_path / "step-3") and not checkpoint.is_kept(tmp_path / "step-5")


def test_delete_refuses_paths_outside_missing_checkpoints_and_the_newest(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints" / "tiny"
    fake_steps(root, [1, 2, 3])
    (tmp_path / "step-9").mkdir()
    (tmp_path / "step-9" / checkpoint.STATE_FILE).write_text("{}")
    cases = {
        str(tmp_path / "step-9"): grpc.StatusCode.INVALID_ARGUMENT,  # outside the root
        str(root / "step-1" / ".."): grpc.StatusCode.INVALID_ARGUMENT,  # the root itself
        str(root / "step-1" / checkpoint.STATE_FILE): grpc.StatusCode.INVALID_ARGUMENT,
        "": grpc.StatusCode.INVALID_ARGUMENT,
        str(root / "step-7"): grpc.StatusCode.NOT_FOUND,
        str(root / "step-3"): grpc.StatusCode.FAILED_PRECONDITION,  # a resume's start
    }
    for path, code in cases.items():
        with pytest.raises(SwarmError) as err:
            checkpoint.delete(root, path)
        assert (err.value.code.name, err.value.field) == (code.name, "path"), path
    assert steps_in(root) == [1, 2, 3] and (tmp_path / "step-9").is_dir()
    assert checkpoint.delete(root, str(root / "step-2")) == root / "step-2"
    assert steps_in(root) == [1, 3] and not list(root.glob(".step-*"))


async def play_group(client: swarmrl.AsyncSwarmClient, group: str) -> None:
    for reward in (0.0, 1.0):
        async with client.episode(task_id="t", group_id=group) as ep:
            await ep.chat([{"role": "user", "content": "hi"}], max_tokens=2)
            await ep.reward(reward)


async def checkpointed(trainer: Any, step: int) -> None:
    """Waits until `trainer`'s periodic checkpoint of `step` is written and pruned."""
    await wait_for_step(trainer, step)

    def saved() -> None:
        assert trainer.last_checkpoint_step >= step
    await assert_eventually(saved, 30)


async def test_saved_checkpoints_outlive_retention_and_restarts_until_deleted(
        make_server: ServerFactory) -> None:
    running = await make_server(train=TRAIN)
    root = checkpoint.checkpoint_root(running.config.data_dir, "tiny")
    async with swarmrl.AsyncSwarmClient(running.grpc_target) as client:
        await play_group(client, "a")
        await wait_for_step(running.swarm.models["tiny"].trainer, 1)
        (saved,) = await client.save_checkpoint()
        assert Path(saved) == root / "step-1" and checkpoint.is_kept(Path(saved))
        await play_group(client, "b")
        await checkpointed(running.swarm.models["tiny"].trainer, 2)
        assert steps_in(root) == [1, 2]  # keep_checkpoints=1: step-1 stays, kept
    config = running.config
    await make_server.stop(running)

    running = await make_server(config)  # resumes from step-2; step-1's mark is on disk
    trainer = running.swarm.models["tiny"].trainer
    assert trainer is not None and trainer.step == 2
    async with swarmrl.AsyncSwarmClient(running.grpc_target) as client:
        await play_group(client, "c")
        await checkpointed(trainer, 3)
        assert steps_in(root) == [1, 3]  # step-2 pruned; step-1 outlived the restart
        # A client names a checkpoint by its step (it cannot see the data dir).
        restored = await client.restore_checkpoint("1")
        assert restored.step == 1 and restored.policy_version > 3
        assert (await client.restore_checkpoint("step-3")).step == 3
        with pytest.raises(swarmrl.InvalidArgumentError) as pruned:
            await client.restore_checkpoint("2")
        assert pruned.value.field == "path"

        with pytest.raises(swarmrl.FailedPreconditionError) as newest:
            await client.delete_checkpoint(str(root / "step-3"))
        with pytest.raises(swarmrl.NotFoundError) as missing:
            await client.delete_checkpoint(str(root / "step-2"))
        with pytest.raises(swarmrl.InvalidArgumentError) as outside:
            await client.delete_checkpoint(str(config.data_dir))
        assert newest.value.field == missing.value.field == outside.value.field == "path"
        with pytest.raises(swarmrl.NotFoundError):  # a model the server does not host
            await client.delete_checkpoint(saved, model="other")
        assert steps_in(root) == [1, 3]
        await client.delete_checkpoint(saved, model="tiny")
        assert steps_in(root) == [3]


async def test_only_an_admin_deletes_checkpoints(make_server: ServerFactory) -> None:
    """DeleteCheckpoint is admin only; through the sync facade too."""
    running = await make_server(train=TRAIN, admin_keys=("adm-key",), client_keys=("cli-key",))

    def delete(api_key: str) -> None:
        with swarmrl.SwarmClient(running.grpc_target, api_key=api_key) as client:
            client.delete_checkpoint("nowhere")

    with pytest.raises(swarmrl.PermissionDeniedError):
        await asyncio.to_thread(delete, "cli-key")
    with pytest.raises(swarmrl.InvalidArgumentError) as refused:  # past the door: the path
        await asyncio.to_thread(delete, "adm-key")
    assert refused.value.field == "path"
