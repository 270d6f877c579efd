"""A hosted model: its engine, where it came from, and (when trainable) its trainer; and
the one loader that turns the configured models into hosts, wherever their engines run.

Models trained with LoRA (train option lora_rank > 0) are adapters: in process, those on
the same weights and engine share ONE base engine (one copy of the weights on hf, one vLLM
server serving all their adapters), each model an `AdapterEngine` view of it. So
`--model a=smollm2 --model b=smollm2 --train-option lora_rank=8` holds SmolLM2 once. LoRA
is a training choice, so it is said where training is configured (per model with
`a.lora_rank=8`), not in the model spec: the spec says what a model is, and a base shared
by adapters needs no spelling of its own. With Ray, every replica holds its own base and
adapter, and the router pushes each new adapter version to all of them.

A host's trainer is seen here, and by everything that reaches it through a host (the
swarm, the live snapshot), only as a `TrainerHandle`: what they call of it, no more. The
trainer package never imports this module; `swarmrl_server.wiring` sets `host.trainer`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from swarmrl_server.config import ModelSpec, ServerConfig
from swarmrl_server.engine.adapter import AdapterEngine, LoraSlots, LoraSpec
from swarmrl_server.engine.base import Engine
from swarmrl_server.engine.registry import EngineOptions, build_engine
from swarmrl_server.models import resolve_model
from swarmrl_server.store.records import EpisodeRecord


class TrainerSettings(Protocol):
    """The settings of a trainer the live snapshot shows (`trainer.config.TrainerConfig`)."""

    @property
    def batch_rule(self) -> str: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def group_size(self) -> int: ...

    @property
    def max_steps(self) -> int:
        """0: no limit."""
        ...


class HoldView(Protocol):
    """A hold of a trainer's training, as the server lists it (`trainer.holds.Hold`)."""

    @property
    def holder(self) -> str: ...

    @property
    def reason(self) -> str: ...

    @property
    def since(self) -> float:
        """When it was first taken (seconds since the epoch)."""
        ...

    @property
    def session_id(self) -> str:
        """The session it lasts with; "" for a hold on a lease of its own."""
        ...

    @property
    def expires_at(self) -> float:
        """When its own lease runs out (0 when it lasts with a session)."""
        ...


class TrainerHandle(Protocol):
    """What the server calls of a model's trainer (`trainer.trainer.Trainer`): episodes
    in, clients' done declarations, checkpoints, holds (leases) and restores for the admin, its
    progress for the live snapshot and the gauges, and its stop."""

    @property
    def name(self) -> str:
        """The model it trains."""
        ...

    @property
    def config(self) -> TrainerSettings: ...

    @property
    def step(self) -> int: ...

    @property
    def policy_version(self) -> int: ...

    @property
    def error(self) -> BaseException | None:
        """What stopped its loop, if anything did."""
        ...

    @property
    def pending(self) -> int:
        """Ended episodes waiting for a batch."""
        ...

    def pending_records(self) -> list[EpisodeRecord]: ...

    def notify_episode_ended(self, record: EpisodeRecord) -> None: ...

    def declare_done(self, session_id: str) -> None: ...

    async def save_checkpoint(self, *, kept: bool = False) -> Path:
        """`kept`: on a client's request, so outside the automatic retention."""
        ...

    async def delete_checkpoint(self, path: str) -> Path:
        """Removes one checkpoint (never the newest); returns its directory."""
        ...

    async def hold(self, holder: str, reason: str, *, session_id: str = "",
                   lease_s: float | None = None) -> tuple[int, int]:
        """Holds training for `holder`, a lease bound to `session_id` or lasting `lease_s`
        unless renewed (`trainer.holds`): (version, step)."""
        ...

    def release(self, holder: str) -> None: ...

    def lapse_holds(self) -> int:
        """Drops the holds that lapsed (a session ended, a lease ran out); how many."""
        ...

    def list_holds(self) -> Sequence[HoldView]:
        """The holds that last now, the oldest first."""
        ...

    async def restore(self, path: Path) -> tuple[int, int]:
        """Back to the checkpoint at `path`: (version, step) after it."""
        ...

    async def stop(self) -> None: ...


@dataclass
class ModelHost:
    """Everything the server holds for one model it serves."""

    name: str
    engine: Engine
    source: str
    """The spec it was loaded from (a path, "tiny", "smollm2")."""
    path: Path | None = None
    """Directory of the weights in HF format (the trainer loads its own copy from it)."""
    trainable: bool = False
    trainer: TrainerHandle | None = None
    """The model's trainer when trainable and training (set by `swarmrl_server.wiring`)."""

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer  # type: ignore[attr-defined]


Placement = Callable[[ModelSpec, EngineOptions], Engine]
"""Builds one model's engine from its spec (whose `engine` names a registered kind) and
options: `build_local` in process, `scale.replicas.RayPlacement` as Ray actors."""


def engine_options(spec: ModelSpec, path: Path, config: ServerConfig) -> EngineOptions:
    """The options a model's engine is built with, from its spec and the server's config."""
    return EngineOptions(
        name=spec.name, path=path, max_batch_size=config.max_batch_size, urls=spec.urls,
        work_dir=config.data_dir or config.cache_dir, vllm_python=config.vllm_python,
        trainable=config.train,
    )


def build_local(spec: ModelSpec, options: EngineOptions) -> Engine:
    """The in-process placement: the engine itself."""
    return build_engine(spec.engine or "hf", options)


def load_hosts(config: ServerConfig, place: Placement = build_local, *,
               loras: Mapping[str, LoraSpec] | None = None,
               share_bases: bool = True) -> dict[str, ModelHost]:
    """A host per configured model (names must differ), its weights resolved (built or
    converted into the cache when needed) and its engine placed by `place`. `loras` names
    the models trained as adapters (read from the train options by the app, which sits
    above both this loader and the trainer); those on the same weights and engine share
    one base when `share_bases` (module docstring)."""
    names = [spec.name for spec in config.models]
    twice = next((n for n in names if names.count(n) > 1), None)
    if twice is not None:
        raise ValueError(f"two models are named {twice!r}")
    paths = {spec.name: resolve_model(spec.source, config.cache_dir) for spec in config.models}
    loras = dict(loras or {})
    engines: dict[str, Engine] = {}
    if share_bases:
        engines.update(_shared_bases(config, place, paths, loras))
    hosts: dict[str, ModelHost] = {}
    for spec in config.models:
        path = paths[spec.name]
        options = engine_options(spec, path, config)
        if spec.name in loras:  # an adapter with a base of its own
            lora = loras[spec.name]
            options = replace(options, adapter=lora, lora=LoraSlots(1, lora.rank))
        engine = engines.get(spec.name) or place(spec, options)
        hosts[spec.name] = ModelHost(spec.name, engine, spec.source, path, trainable=config.train)
    return hosts


def _shared_bases(config: ServerConfig, place: Placement, paths: dict[str, Path],
                  loras: dict[str, LoraSpec]) -> dict[str, AdapterEngine]:
    """One base engine per (weights, engine, vLLM URLs) among the LoRA models, and each
    model's adapter view of it."""
    groups: dict[tuple[str, str | None, tuple[str, ...]], list[ModelSpec]] = {}
    for spec in config.models:
        if spec.name in loras:
            groups.setdefault((str(paths[spec.name]), spec.engine, spec.urls), []).append(spec)
    views: dict[str, AdapterEngine] = {}
    for members in groups.values():
        base_spec = replace(members[0], name="+".join(s.name for s in members))
        slots = LoraSlots(len(members), max(loras[s.name].rank for s in members))
        options = replace(engine_options(base_spec, paths[members[0].name], config), lora=slots)
        base = place(base_spec, options)
        shared: list[AdapterEngine] = []
        for spec in members:
            views[spec.name] = AdapterEngine(spec.name, base, loras[spec.name], shared=shared)
    return views
