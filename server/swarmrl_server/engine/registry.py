"""Engines by name: each kind registers a builder that takes typed options and declares
the resources one replica of it holds.

`swarmrl serve --engine NAME` and `--model SOURCE@NAME` look kinds up here, and both
placements build through `build_engine`: in process (`hosting.load_hosts`) and in a Ray
actor per replica (`scale.replicas`), which also reserves the kind's `Resources`. An
engine's name is spelled once, in its `register` call below; nothing else branches on it.

Builders import their engine when called, so choosing `echo` loads no model code and
choosing `hf` never imports vLLM's client. This module imports nothing heavy (the
configuration reads the names from it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swarmrl_server.engine.adapter import LoraSlots, LoraSpec
    from swarmrl_server.engine.base import Engine


@dataclass(frozen=True)
class Resources:
    """What one replica of an engine reserves when Ray places it."""

    cpus: float = 1.0
    gpus: float = 0.0


@dataclass(frozen=True)
class EngineOptions:
    """Everything a builder may read: one model's spec and the server's settings for it."""

    name: str
    """The model's name, as clients address it."""
    path: Path
    """Directory of its weights in HF format."""
    max_batch_size: int = 32
    """Most concurrent generations one engine batches together (hf)."""
    urls: tuple[str, ...] = ()
    """Running servers to attach to (kinds with `attaches=True`); empty: launch one."""
    work_dir: Path | None = None
    """Where launched servers log and synced weights are written (default ./runs)."""
    vllm_python: Path | None = None
    """Python of the venv holding vLLM, for launched servers."""
    trainable: bool = False
    """The model is trained: its engine must serve logprobs a trainer can reproduce."""
    lora: LoraSlots | None = None
    """The engine serves LoRA adapters (how many, the largest rank): a launched vLLM server
    gets --enable-lora for them; None: no adapters."""
    adapter: LoraSpec | None = None
    """The model is this LoRA adapter of the weights at `path`: `build_engine` returns its
    `AdapterEngine` over a base of its own (each Ray replica holds one; in process, models
    on the same weights share one base instead, see `hosting.load_hosts`)."""


@dataclass(frozen=True)
class EngineKind:
    """A registered engine: how to build it and what a replica of it holds."""

    name: str
    build: Callable[[EngineOptions], Engine]
    resources: Resources = Resources()
    attaches: bool = False
    """Whether it can attach to running servers (`--engine-url`)."""
    summary: str = ""


_KINDS: dict[str, EngineKind] = {}


def register(kind: EngineKind) -> EngineKind:
    """Adds an engine kind; a name registered twice is a mistake (ValueError)."""
    if kind.name in _KINDS:
        raise ValueError(f"engine {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def engine_names() -> tuple[str, ...]:
    """Registered engine names, in registration order (the default first)."""
    return tuple(_KINDS)


def engine_kind(name: str) -> EngineKind:
    """The kind registered as `name`; ValueError listing the known ones otherwise."""
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(
            f"engine {name!r}: expected one of {', '.join(_KINDS)}"
        ) from None


def build_engine(kind: str, options: EngineOptions) -> Engine:
    """The engine `kind` names, built from `options` (loading nothing it does not need);
    for an adapter (`options.adapter`), its view over a base built so."""
    engine = engine_kind(kind).build(options)
    if options.adapter is None:
        return engine
    from swarmrl_server.engine.adapter import AdapterEngine

    return AdapterEngine(options.name, engine, options.adapter, shared=[])


def _hf(o: EngineOptions) -> Engine:
    from swarmrl_server.engine.hf.engine import HFEngine

    return HFEngine.from_pretrained(o.name, o.path, max_batch_size=o.max_batch_size)


def _vllm(o: EngineOptions) -> Engine:
    """As `swarmrl serve --engine vllm` builds it: logs and synced weights under
    `<work_dir>/vllm`."""
    from swarmrl_server.engine.vllm.engine import VLLMEngine

    work = (o.work_dir or Path.cwd() / "runs") / "vllm"
    return VLLMEngine(o.name, o.path, urls=o.urls, python=o.vllm_python, log_dir=work,
                      trainable=o.trainable, lora=o.lora)


def _echo(o: EngineOptions) -> Engine:
    from swarmrl_server.engine.echo import EchoEngine

    return EchoEngine.from_pretrained(o.name, o.path)


register(EngineKind("hf", _hf, summary="transformers, in process (the default)"))
register(EngineKind("vllm", _vllm, Resources(gpus=1.0), attaches=True,
                    summary="vLLM servers, launched or attached"))
register(EngineKind("echo", _echo, summary="no model: front-door load tests"))
