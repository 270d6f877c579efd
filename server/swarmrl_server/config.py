"""Server configuration: one frozen dataclass, filled from the command line."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from swarmrl_server.engine.registry import engine_kind, engine_names

PAUSE_WAIT_S = 300.0
"""Default of `--pause-wait`: how long a call made during a pause waits for it to lift
(long enough to wait out a weight sync)."""


def default_torch_threads() -> int:
    """Half the CPU cores, at least 1: see `ServerConfig.torch_threads`."""
    return max(1, (os.cpu_count() or 2) // 2)


@dataclass(frozen=True)
class ModelSpec:
    """A model to host."""

    name: str
    """Name clients address it by."""
    source: str
    """"tiny", "tiny:SEED", "smollm2" or a directory with HF weights."""
    engine: str | None = None
    """A registered engine ("hf", "vllm", "echo": `engine.registry`); None takes the
    server's default (`--engine`)."""
    urls: tuple[str, ...] = ()
    """Servers to attach to (an engine that attaches, e.g. "vllm"); empty: swarmrl
    launches its own."""

    @classmethod
    def parse(cls, text: str) -> ModelSpec:
        """"[NAME=]SOURCE[@ENGINE]": named after SOURCE when NAME is left out."""
        engine = None
        head, at, tail = text.rpartition("@")
        if at and tail in engine_names():
            text, engine = head, tail
        name, sep, source = text.partition("=")
        if not sep:
            source = name
            name = Path(text).name if "/" in text else text.replace(":", "-")
        if not name or not source:
            raise ValueError(f"model spec {text!r}: expected [NAME=]SOURCE[@ENGINE]")
        return cls(name, source, engine)


def with_engines(
    specs: tuple[ModelSpec, ...], default: str = "hf", urls: list[str] | tuple[str, ...] = ()
) -> tuple[ModelSpec, ...]:
    """Gives every spec an engine (its own, else `default`) and hands out `--engine-url`s:
    "NAME=URL" goes to model NAME, a bare URL to the first model whose engine attaches."""
    engine_kind(default)  # ValueError naming the known engines
    specs = tuple(replace(s, engine=s.engine or default) for s in specs)
    by_name: dict[str, list[str]] = {s.name: list(s.urls) for s in specs}
    attaches = {s.name for s in specs if engine_kind(s.engine or default).attaches}
    first_attaching = next((s.name for s in specs if s.name in attaches), None)
    for item in urls:
        name, sep, url = item.partition("=")
        if not sep or "://" in name:
            name, url = first_attaching or "", item
        if name not in by_name:
            raise ValueError(
                f"--engine-url {item!r}: no model {name + ' ' if name else ''}whose engine "
                "attaches to servers"
            )
        spec = next(s for s in specs if s.name == name)
        if spec.name not in attaches:
            raise ValueError(
                f"--engine-url {item!r}: model {name!r} runs on {spec.engine}, which does not "
                "attach to servers"
            )
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--engine-url {item!r}: expected an http(s):// URL")
        by_name[name].append(url.rstrip("/"))
    return tuple(replace(s, urls=tuple(by_name[s.name])) for s in specs)


@dataclass(frozen=True)
class ServerConfig:
    """How `swarmrl serve` runs."""

    models: tuple[ModelSpec, ...] = (ModelSpec("tiny", "tiny"),)
    """Models to host; the first is the default for episodes that name none."""
    host: str = "127.0.0.1"
    """Address to bind; loopback unless told otherwise (clients are untrusted)."""
    port: int = 50051
    """gRPC port; 0 picks a free one (printed at start-up)."""
    http_port: int | None = 8000
    """OpenAI-compatible HTTP port; None disables the shim, 0 picks a free one."""
    data_dir: Path | None = None
    """Where episodes, checkpoints and logs live; None keeps everything in memory."""
    cache_dir: Path | None = None
    """Where built/converted models are cached (default $SWARMRL_CACHE or ~/.cache/swarmrl)."""
    admin_keys: tuple[str, ...] = ()
    """API keys with the admin role; with no keys at all, the server is open."""
    client_keys: tuple[str, ...] = ()
    """API keys with the client role."""
    tls_cert: Path | None = None
    """PEM certificate chain; with tls_key, serves gRPC over TLS."""
    tls_key: Path | None = None
    """PEM private key for tls_cert."""
    torch_threads: int | None = None
    """Intra-op threads for torch; None means half the CPU cores (at least 1). The engine
    and the trainer each run torch on their own thread, and OpenMP teams wider than the
    cores left to them spin against each other: on 2 cores, 1 thread each generates
    several times faster than 2 each (benchmarks/grpc_vs_engine.py)."""
    max_batch_size: int = 32
    """Most concurrent generations one engine batches together."""
    max_inflight: int = 512
    """Most generations per model at once; more get UNAVAILABLE / HTTP 429 with a retry hint."""
    pause_wait_s: float = PAUSE_WAIT_S
    """How long a call waits for a pause of its model (admin, weight sync, back-pressure)
    to lift before it gets UNAVAILABLE / HTTP 429; 0 refuses at once."""
    default_max_tokens: int = 256
    """max_tokens for requests that give none."""
    force_temperature: float | None = None
    """Sample every generation at this temperature (reported to clients as an override)."""
    grace_s: float = 5.0
    """On shutdown, how long calls in flight may finish."""
    train: bool = False
    """Train the hosted models on ended episodes."""
    train_options: dict[str, str] = field(default_factory=dict)
    """Trainer settings (key=value), see `swarmrl serve --help`."""
    resume: Path | None = None
    """Checkpoint directory to resume training from."""
    ray: bool = False
    """Place engine replicas and trainer workers as Ray actors (`scale.replicas`, `scale.workers`)."""
    ray_address: str | None = None
    """Ray cluster to join (e.g. "auto" or "10.0.0.1:6379"); None starts a local one."""
    replicas: int = 1
    """Engine replicas per model (with ray), behind a sticky router."""
    vllm_python: Path | None = None
    """Python of the venv holding vLLM, for launched vLLM servers (default:
    $SWARMRL_VLLM_PYTHON, else .venv-vllm/bin/python beside the checkout swarmrl was
    installed from, else in the working directory: `swarmrl.vllm_venv`)."""
