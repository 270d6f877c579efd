"""A hosted model: its engine, where it came from, and (when trainable) its trainer; and
the one loader that turns the configured models into hosts, wherever their engines run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmrl_server.config import ModelSpec, ServerConfig
from swarmrl_server.engine.base import Engine
from swarmrl_server.engine.registry import EngineOptions, build_engine
from swarmrl_server.models import resolve_model


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
    trainer: Any = None
    """The model's trainer when trainable (see swarmrl_server.trainer)."""

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


def load_hosts(config: ServerConfig, place: Placement = build_local) -> dict[str, ModelHost]:
    """A host per configured model (names must differ), its weights resolved (built or
    converted into the cache when needed) and its engine placed by `place`."""
    hosts: dict[str, ModelHost] = {}
    for spec in config.models:
        if spec.name in hosts:
            raise ValueError(f"two models are named {spec.name!r}")
        path = resolve_model(spec.source, config.cache_dir)
        engine = place(spec, engine_options(spec, path, config))
        hosts[spec.name] = ModelHost(spec.name, engine, spec.source, path, trainable=config.train)
    return hosts
