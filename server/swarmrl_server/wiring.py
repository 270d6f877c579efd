"""Attaches a trainer to every trainable model of a started swarm (`swarmrl serve --train`):
the one place that knows both the swarm and the trainer, and builds each trainer's port.

It sits with the app, above both: the trainer package sees the server only through its
port (`trainer.port`), and the swarm sees a trainer only as a `hosting.TrainerHandle`
(tests/server/test_architecture.py holds the trainer package off the swarm and hosting)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch

from swarmrl_server.config import ServerConfig
from swarmrl_server.hosting import ModelHost
from swarmrl_server.pauses import TRAINER
from swarmrl_server.swarm import Swarm
from swarmrl_server.trainer.config import TrainerConfig, TrainerConfigError, options_per_model
from swarmrl_server.trainer.port import TrainingPort
from swarmrl_server.trainer.trainer import Trainer
from swarmrl_server.trainer.workers import GroupFactory, LocalGroup


async def attach_trainers(
    swarm: Swarm, config: ServerConfig, *, start_group: GroupFactory = LocalGroup
) -> None:
    """Parses the train options (a bad one stops start-up with the valid choices listed),
    then starts one trainer per trainable model, resuming from `config.resume` if set.
    `start_group` starts each model's worker group (the app passes Ray's with --ray)."""
    per_model = options_per_model(config.train_options, list(swarm.models))
    for name, options in per_model.items():
        workers = TrainerConfig.from_options(options).workers
        if workers > 1 and not config.ray:
            raise TrainerConfigError(
                f"model {name}: workers={workers} places FSDP2 workers with Ray: add --ray "
                "(and --ray-address for an existing cluster)")
    for host in swarm.models.values():
        if not host.trainable:
            continue
        train = TrainerConfig.from_options(per_model[host.name])
        if train.weight_sync == "auto":
            train = dataclasses.replace(train, weight_sync=host.engine.weight_sync_default)
        trainer = Trainer(training_port(swarm, host, weight_sync=train.weight_sync), train,
                          start_group=start_group)
        await trainer.start(resume=config.resume)
        host.trainer = trainer


def training_port(swarm: Swarm, host: ModelHost, *, weight_sync: str = "wait") -> TrainingPort:
    """What the trainer of `host`'s model sees of `swarm`; `weight_sync` (the train
    option): how its pushes reach the calls in flight."""
    if host.path is None:
        raise TrainerConfigError(f"model {host.name!r} has no weights directory to train from")
    return TrainingPort(
        model=host.name, weights_dir=host.path, data_dir=swarm.data_dir, store=swarm.store,
        metrics=swarm.telemetry, pause=swarm.pauses.holder(TRAINER, host.name),
        weights=EngineWeights(swarm, host, interrupt=weight_sync == "interrupt"),
        active_sessions=swarm.active_session_ids,
        open_groups=lambda: open_groups(swarm, host.name),
    )


def open_groups(swarm: Swarm, model: str) -> set[tuple[str, str]]:
    """(task id, group id) of the open episodes that list `model`: the groups its trainer
    must not plan yet (trainer.batching's seal)."""
    return {(r.task_id, r.group_id) for r, _, _ in swarm.episodes.open_episodes()
            if model in r.models}


class EngineWeights:
    """New weights to the model's engine, then the clients told (`port.WeightsOut`)."""

    def __init__(self, swarm: Swarm, host: ModelHost, *, interrupt: bool = False) -> None:
        """`interrupt`: calls in flight continue on the new weights (weight_sync=interrupt)."""
        self._swarm = swarm
        self._host = host
        self._interrupt = interrupt

    @property
    def served_version(self) -> int:
        return self._host.engine.policy_version

    async def push(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        await self._host.engine.update_weights(state_dict, version, interrupt=self._interrupt)
        await self._swarm.policy_version_changed(self._host.name, version)
