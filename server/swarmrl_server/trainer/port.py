"""The training port: everything a trainer sees of the server it trains for.

A trainer never holds the swarm. It is handed, for its one model: where the weights
to train are, the store's episode reads and its own consumption ledger, a metrics sink,
its own pause holder of that model, the sessions that count for batch_rule=clients, and
where new weights go. Ended episodes come in the other way, by `Trainer.
notify_episode_ended`. `swarmrl_server.wiring` builds a port from a started swarm; a test
can build one from fakes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from swarmrl_server.store.records import EpisodeRecord


class TrainingStore(Protocol):
    """The store's reads a trainer needs, and its ledger: which step consumed which
    episode, and which policy versions were issued (and lost)."""

    async def get_episode(self, episode_id: str, *, with_calls: bool = False
                          ) -> EpisodeRecord | None: ...

    async def unconsumed_ended_episodes(self, model: str) -> list[EpisodeRecord]: ...

    async def queued_not_called(self, model: str) -> int: ...

    async def mark_consumed(self, model: str, episode_ids: Iterable[str], step: int) -> None: ...

    async def consumed_episodes(self, model: str) -> dict[str, int]: ...

    async def forget_consumed_after(self, model: str, step: int) -> None: ...

    async def consumed_after(self, model: str, step: int) -> tuple[int, int]: ...

    async def record_version(self, model: str, version: int, step: int) -> None: ...

    async def issued_versions(self, model: str) -> list[tuple[int, int, bool]]: ...

    async def mark_versions_lost(self, model: str, above: int) -> int: ...

    async def record_recovery(self, model: str, checkpoint_step: int, lost_from: int,
                              lost_to: int, retrained: int) -> None: ...


class MetricsSink(Protocol):
    """Where a trainer's step metrics, drop counts and lapsed holds go (the server's
    telemetry)."""

    def trainer_step(self, model: str, step: int, values: Mapping[str, float],
                     staleness: Sequence[int]) -> None: ...

    def episodes_dropped_by(self, model: str, counts: Mapping[str, int]) -> None: ...

    def hold_lapsed(self, model: str, cause: str) -> None:
        """A hold of `model`'s training lapsed ("session" or "lease", trainer/holds.py)."""
        ...


class PauseHolder(Protocol):
    """The trainer's own pause of its model: holding it refuses generation of that model
    only; releasing lifts this holder's pause only (never an admin's)."""

    async def hold(self, reason: str) -> None: ...

    async def release(self) -> None: ...


class WeightsOut(Protocol):
    """Where trained weights go: the model's engine(s), and the clients told of the new
    policy version."""

    @property
    def served_version(self) -> int:
        """The policy version the engine serves now (the start when nothing resumes)."""
        ...

    async def push(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None: ...


@dataclass(frozen=True)
class TrainingPort:
    """What the trainer of `model` is given."""

    model: str
    weights_dir: Path
    """The model's weights in HF format (the trainer loads its own copy)."""
    data_dir: Path | None
    """Where checkpoints go (None: the server keeps no data dir, so none are written)."""
    store: TrainingStore
    metrics: MetricsSink
    pause: PauseHolder
    weights: WeightsOut
    active_sessions: Callable[[], set[str]]
    """Ids of the client sessions whose lease is live (batch_rule=clients)."""
    open_groups: Callable[[], Collection[tuple[str, str]]]
    """(task id, group id) of the episodes still open that list the model: the groups
    they would join are sealed, never planned (trainer.batching)."""
