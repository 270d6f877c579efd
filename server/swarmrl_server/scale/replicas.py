"""Engine replicas as Ray actors (`swarmrl serve --ray --replicas N`).

Each model gets N `EngineReplicaActor`s, each building the engine its spec names
through `engine.registry` (the same builders as in process) and reserving that kind's
`Resources`; Ray restarts a dead one (`max_restarts`). The server talks to a replica
through `RayReplica`, an `Engine`, and to all of a model's replicas through
`scale.router.Router`, also an `Engine`: the rest of the server does not know Ray is
there. The GPU resources are NOT TESTED here (no GPU); the same code runs with
num_gpus=0 on the CPU test cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import torch

from swarmrl_server.engine.base import Engine, GenerationChunk, GenerationOutput, SamplingParams
from swarmrl_server.engine.registry import EngineKind, EngineOptions, build_engine, engine_kind
from swarmrl_server.scale.router import ReplicaDied, Router

if TYPE_CHECKING:
    from swarmrl_server.config import ModelSpec

log = structlog.get_logger("swarmrl.ray")

REPLICA_MAX_RESTARTS = 3
"""How often Ray restarts a dead engine replica."""


def _unwrap(exc: Exception) -> Exception:
    """A dead actor as `ReplicaDied`; an engine's own error (e.g. a SwarmError naming a
    bad field) as itself rather than Ray's wrapper, so the front doors translate it."""
    if _is_death(exc):
        return ReplicaDied(str(exc))
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, Exception) else exc


def _is_death(exc: BaseException) -> bool:
    import ray.exceptions as rex

    return isinstance(exc, (rex.RayActorError, rex.ActorUnavailableError, rex.WorkerCrashedError))


class EngineReplicaActor:
    """Runs in a Ray actor: one engine of one model (asyncio actor: calls interleave)."""

    def __init__(self, kind: str, options: EngineOptions, torch_threads: int) -> None:
        torch.set_num_threads(max(1, torch_threads))
        self.engine = build_engine(kind, options)
        self._started = False

    async def _start(self) -> None:
        if not self._started:
            await self.engine.start()
            self._started = True

    def info(self) -> dict[str, Any]:
        e = self.engine
        return {"max_model_len": e.max_model_len, "vocab_size": e.vocab_size,
                "eos_token_ids": tuple(e.eos_token_ids), "policy_version": e.policy_version,
                "weight_sync_default": e.weight_sync_default,
                "pid": os.getpid()}

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[GenerationChunk | GenerationOutput]:
        await self._start()
        async for item in self.engine.generate(prompt_ids, params):
            yield item

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int,
                             interrupt: bool = False) -> int:
        await self._start()
        await self.engine.update_weights(state_dict, version, interrupt=interrupt)
        return self.engine.policy_version

    async def ping(self) -> int:
        await self._start()
        return os.getpid()

    async def stop(self) -> None:
        if self._started:
            await self.engine.stop()
            self._started = False


class RayReplica(Engine):
    """An engine replica in a Ray actor; Ray's failures surface as `ReplicaDied`."""

    def __init__(self, name: str, actor: Any, info: Mapping[str, Any], tokenizer: Any) -> None:
        self.name = name
        self.actor = actor
        self.max_model_len = int(info["max_model_len"])
        self.vocab_size = int(info["vocab_size"])
        self.weight_sync_default = str(info["weight_sync_default"])
        self.eos_token_ids = tuple(info["eos_token_ids"])
        self.tokenizer = tokenizer
        self._version = int(info["policy_version"])
        self._put: tuple[Mapping[str, torch.Tensor], Any] | None = None

    @property
    def policy_version(self) -> int:
        return self._version

    async def start(self) -> None:
        await self.ping()

    async def stop(self) -> None:
        try:
            await self.actor.stop.remote()
        except Exception:  # a dead replica has nothing to stop
            pass

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncIterator[GenerationChunk | GenerationOutput]:
        import ray

        stream = self.actor.generate.options(num_returns="streaming").remote(
            list(prompt_ids), params)
        finished = False
        try:
            async for ref in stream:
                yield await ref
            finished = True
        except Exception as exc:
            finished = True
            err = _unwrap(exc)
            if err is exc:
                raise
            raise err from exc
        finally:
            if not finished:  # the caller went away: cancel the generation in the replica
                with contextlib.suppress(Exception):
                    ray.cancel(stream)

    async def update_weights(
        self, state_dict: Mapping[str, torch.Tensor], policy_version: int, *,
        interrupt: bool = False,
    ) -> None:
        import ray

        # The router hands every replica the same dict: put it in the object store once.
        # (Keyed by the dict itself, held here, so a recycled id() can never match.)
        if self._put is None or self._put[0] is not state_dict:
            self._put = (state_dict, await asyncio.to_thread(ray.put, dict(state_dict)))
        try:
            self._version = await self.actor.update_weights.remote(
                self._put[1], policy_version, interrupt)
        except Exception as exc:
            err = _unwrap(exc)
            if err is exc:
                raise
            raise err from exc

    async def ping(self) -> int:
        try:
            pid: int = await self.actor.ping.remote()
        except Exception as exc:
            err = _unwrap(exc)
            if err is exc:
                raise
            raise err from exc
        return pid


def start_replicas(
    kind: EngineKind, options: EngineOptions, n: int, *, torch_threads: int = 1,
    max_restarts: int = REPLICA_MAX_RESTARTS,
) -> Router:
    """`n` replica actors of one model behind a Router, each reserving the kind's
    resources (blocks until all are built)."""
    import ray

    cls = ray.remote(EngineReplicaActor)
    res = kind.resources
    # Ray types an actor handle's methods as the class's own (no `.remote`) unless each is
    # decorated with @ray.method: the handles are Any at that boundary, as in RayReplica.
    actors: list[Any] = [cls.options(num_cpus=res.cpus, num_gpus=res.gpus, max_restarts=max_restarts,
                          max_concurrency=1000, name=f"swarmrl-{options.name}-{i}-{os.getpid()}")
              .remote(kind.name, options, torch_threads) for i in range(n)]
    infos = ray.get([a.info.remote() for a in actors])
    tokenizer = _tokenizer(options.path)
    replicas = [RayReplica(options.name, a, info, tokenizer) for a, info in zip(actors, infos)]
    log.info("replicas_started", model=options.name, replicas=n, pids=[i["pid"] for i in infos])
    return Router(options.name, replicas, tokenizer=tokenizer)


def _tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


@dataclass(frozen=True)
class RayPlacement:
    """`hosting.Placement` for `swarmrl serve --ray`: every model's engine is a Router over
    `replicas` actors of the kind its spec names."""

    replicas: int
    torch_threads: int = 1

    def __call__(self, spec: ModelSpec, options: EngineOptions) -> Engine:
        kind = engine_kind(spec.engine or "hf")
        return start_replicas(kind, options, self.replicas, torch_threads=self.torch_threads)
