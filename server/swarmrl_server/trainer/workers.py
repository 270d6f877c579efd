"""The worker group a trainer drives: verl's single-controller shape.

The trainer (the controller) decides *what* to train; a `WorkerGroup` holds the model
and the optimizer state and does the training. Two implementations, one interface, so
the trainer's loop has no branch on where the weights live:

- `LocalGroup`: one process, the model in the trainer's own process (`workers=1`);
- `scale.workers.RayGroup`: N FSDP2 workers as Ray actors, each a shard of the model
  and of the AdamW state (`workers=N`, `swarmrl serve --ray`).

Which one a trainer gets is a `GroupFactory` its builder passes in (the app passes
`scale.workers.start_group` when it places on Ray): the trainer never imports Ray.

Every method is blocking torch (or Ray) work; the trainer calls them off the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import torch

from swarmrl_server.timelines.flops import ModelShape
from swarmrl_server.trainer import checkpoint, lora
from swarmrl_server.trainer.config import TrainerConfig
from swarmrl_server.trainer.device import Placement
from swarmrl_server.trainer.setup import (
    build_optimizer,
    build_policy,
    grammar_for,
    reference_for,
)
from swarmrl_server.trainer.step import EpisodeRows, StepRunner, StepStats, forward_for


class WorkerGroup(Protocol):
    """What a trainer asks of whoever holds its model's weights."""

    shape: ModelShape
    """The model's shape (for the FLOPs-based packing metrics)."""

    def step(self, episodes: Sequence[EpisodeRows], advantages_E_L: torch.Tensor) -> StepStats:
        """One training step on the batch (advantages computed once by the controller)."""
        ...

    def weights(self) -> dict[str, torch.Tensor]:
        """The trained weights on the CPU (what the engines are sent): the whole model's, or
        under LoRA the adapter's alone."""
        ...

    def save(self, root: Path, state: checkpoint.TrainerState, *, source_dir: Path | None,
             keep: int) -> Path:
        """Writes checkpoint step-N under `root` atomically (older ones pruned to `keep`)."""
        ...

    def load(self, path: Path) -> checkpoint.TrainerState:
        """Restores weights and optimizer state from a checkpoint; returns its trainer state."""
        ...

    def close(self) -> None:
        ...


class LocalGroup:
    """The model and its optimizer in this process (`workers=1`)."""

    def __init__(self, path: Path, config: TrainerConfig) -> None:
        placement = Placement.for_option(config.device, bf16=config.bf16)
        policy = build_policy(path, config, placement)
        self.model = policy.model
        self.optimizer = build_optimizer(policy.model, config)
        self.runner = StepRunner(
            policy.model, self.optimizer, config, pad_id=policy.pad_id,
            forward=forward_for(config.packing), placement=placement,
            **reference_for(policy, path, config, placement), **grammar_for(path, config))
        self.shape = ModelShape.from_model(policy.model)

    def step(self, episodes: Sequence[EpisodeRows], advantages_E_L: torch.Tensor) -> StepStats:
        return self.runner.run(episodes, advantages_E_L)

    def weights(self) -> dict[str, torch.Tensor]:
        return lora.policy_weights(self.model)

    def save(self, root: Path, state: checkpoint.TrainerState, *, source_dir: Path | None,
             keep: int) -> Path:
        return checkpoint.save(root, state, self.model, self.optimizer, source_dir=source_dir,
                               keep=keep)

    def load(self, path: Path) -> checkpoint.TrainerState:
        return checkpoint.load_into(path, self.model, self.optimizer)

    def close(self) -> None:
        pass


GroupFactory = Callable[[Path, TrainerConfig], WorkerGroup]
"""Starts the worker group of a model's weights directory and train options (blocking)."""
