"""Ray placement (`swarmrl serve --ray`): engine replicas and trainer workers as Ray actors.

- Engine replicas: `--replicas N` actors per model, each building the engine the model's
  spec names (`app.build_engine`: hf, vllm, echo) in its own process, restarted by Ray
  when they die (`max_restarts`). The server talks to them through `RayReplica`, an
  `Engine`, and to all of a model's replicas through `scale.router.Router`, also an
  `Engine`: the rest of the server does not know Ray is there.
- Trainer workers: `workers=N` (a train option) `TrainerWorker` actors (trainer/
  distributed.py) in a Ray placement group, one bundle of `worker_cpus`/`worker_gpus`
  each; rank 0's node gives the torch.distributed rendezvous address. `RayTrainerGroup`
  is what the trainer drives instead of its in-process `StepRunner`.

Without `--ray` none of this is imported and everything runs in one process.
The GPU resources (num_gpus per replica / worker) are NOT TESTED here (no GPU); the
same code runs with num_gpus=0 on the CPU test cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog
import torch

from swarmrl_server.engine.base import Engine, GenerationChunk, GenerationOutput, SamplingParams
from swarmrl_server.scale.router import ReplicaDied, Router

if TYPE_CHECKING:
    from swarmrl_server.config import ModelSpec, ServerConfig
    from swarmrl_server.hosting import ModelHost
    from swarmrl_server.trainer.checkpoint import TrainerState
    from swarmrl_server.trainer.config import TrainerConfig
    from swarmrl_server.trainer.step import EpisodeRows, StepStats

log = structlog.get_logger("swarmrl.ray")

REPLICA_MAX_RESTARTS = 3
"""How often Ray restarts a dead engine replica."""


_LOCAL_CLUSTER = False
"""This process started the cluster itself: everything stays on loopback."""


def init_ray(address: str | None, *, logical_cpus: float = 0) -> None:
    """Connects to the cluster at `address`, or starts a local one (loopback, no dashboard)
    that advertises at least `logical_cpus` CPUs: actors reserve logical CPUs, and a
    2-core machine must still place 2 replicas and 2 workers (they then share cores)."""
    import ray

    global _LOCAL_CLUSTER
    if ray.is_initialized():
        return
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    runtime_env = {"env_vars": {k: v for k, v in env.items() if v}}
    if address:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
    else:
        _LOCAL_CLUSTER = True
        ray.init(num_cpus=int(max(os.cpu_count() or 1, logical_cpus)),
                 include_dashboard=False, runtime_env=runtime_env, log_to_driver=False,
                 _node_ip_address="127.0.0.1")


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

    def __init__(self, spec: ModelSpec, path: str, config: ServerConfig) -> None:
        from swarmrl_server.app import build_engine

        torch.set_num_threads(max(1, config.torch_threads or 1))
        self.engine = build_engine(spec, Path(path), config)
        self._started = False

    async def _start(self) -> None:
        if not self._started:
            await self.engine.start()
            self._started = True

    def info(self) -> dict[str, Any]:
        e = self.engine
        return {"max_model_len": e.max_model_len, "vocab_size": e.vocab_size,
                "eos_token_ids": tuple(e.eos_token_ids), "policy_version": e.policy_version,
                "pid": os.getpid()}

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams
    ) -> AsyncIterator[GenerationChunk | GenerationOutput]:
        await self._start()
        async for item in self.engine.generate(prompt_ids, params):
            yield item

    async def update_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> int:
        await self._start()
        await self.engine.update_weights(state_dict, version)
        return self.engine.policy_version

    async def policy_version(self) -> int:
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

    async def generate(  # type: ignore[override]
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
        self, state_dict: Mapping[str, torch.Tensor], policy_version: int
    ) -> None:
        import ray

        # The router hands every replica the same dict: put it in the object store once.
        # (Keyed by the dict itself, held here, so a recycled id() can never match.)
        if self._put is None or self._put[0] is not state_dict:
            self._put = (state_dict, await asyncio.to_thread(ray.put, dict(state_dict)))
        try:
            self._version = await self.actor.update_weights.remote(self._put[1], policy_version)
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

    async def served_version(self) -> int:
        """The version the replica's engine itself reports (tests, status)."""
        version: int = await self.actor.policy_version.remote()
        return version


def start_replicas(
    spec: ModelSpec, path: Path, config: ServerConfig, n: int, *,
    cpus: float = 1.0, gpus: float = 0.0, max_restarts: int = REPLICA_MAX_RESTARTS,
) -> Router:
    """`n` replica actors of one model behind a Router (blocks until all are built)."""
    import ray

    cls = ray.remote(EngineReplicaActor)
    actors = [cls.options(num_cpus=cpus, num_gpus=gpus, max_restarts=max_restarts,
                          max_concurrency=1000, name=f"swarmrl-{spec.name}-{i}-{os.getpid()}")
              .remote(spec, str(path), config) for i in range(n)]
    infos = ray.get([a.info.remote() for a in actors])
    tokenizer = _tokenizer(path)
    replicas = [RayReplica(spec.name, a, info, tokenizer) for a, info in zip(actors, infos)]
    log.info("replicas_started", model=spec.name, replicas=n, pids=[i["pid"] for i in infos])
    return Router(spec.name, replicas, tokenizer=tokenizer)


def _tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True)


def load_ray_hosts(config: ServerConfig) -> dict[str, ModelHost]:
    """`app.load_hosts` with every model's engine a Router over `config.replicas` actors."""
    from swarmrl_server.hosting import ModelHost
    from swarmrl_server.models import resolve_model

    hosts: dict[str, ModelHost] = {}
    for spec in config.models:
        if spec.name in hosts:
            raise ValueError(f"two models are named {spec.name!r}")
        path = resolve_model(spec.source, config.cache_dir)
        gpus = 1.0 if spec.engine == "vllm" else 0.0
        router = start_replicas(spec, path, config, config.replicas, gpus=gpus)
        hosts[spec.name] = ModelHost(spec.name, router, spec.source, path,
                                     trainable=config.train)
    return hosts


def _rendezvous(loopback: bool) -> tuple[str, int]:
    """Runs on the rank-0 bundle's node: its address and a free port there."""
    import ray

    host = "127.0.0.1" if loopback else ray.util.get_node_ip_address()
    with socket.socket() as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
    return host, port


class RayTrainerGroup:
    """N FSDP2 `TrainerWorker` actors in one placement group, driven like a StepRunner."""

    def __init__(self, model_path: Path, config: TrainerConfig) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        from swarmrl_server.trainer.distributed import TrainerWorker

        self.config = config
        n = config.workers
        bundle = {"CPU": config.worker_cpus, **({"GPU": config.worker_gpus}
                                                 if config.worker_gpus else {})}
        self.pg = placement_group([dict(bundle) for _ in range(n)], strategy="PACK")
        ray.get(self.pg.ready(), timeout=300)

        def on(i: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(placement_group=self.pg,
                                                    placement_group_bundle_index=i)

        addr, port = ray.get(ray.remote(_rendezvous).options(
            num_cpus=0, scheduling_strategy=on(0)).remote(_LOCAL_CLUSTER))
        cls = ray.remote(TrainerWorker)
        self.workers = [
            cls.options(num_cpus=config.worker_cpus, num_gpus=config.worker_gpus,
                        scheduling_strategy=on(i))
            .remote(i, n, addr, port, str(model_path), config.to_dict())
            for i in range(n)]
        ray.get([w.ping.remote() for w in self.workers])
        log.info("trainer_workers_started", workers=n, rendezvous=f"{addr}:{port}")

    def advantages(self, episodes: Sequence[EpisodeRows]) -> torch.Tensor:
        from swarmrl_server.trainer import algorithms
        from swarmrl_server.trainer.step import generated_mask

        rewards_E = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
        return algorithms.compute_advantages(
            rewards_E, generated_mask(episodes), [e.uid for e in episodes], self.config)

    def run(self, episodes: Sequence[EpisodeRows], advantages_E_L: torch.Tensor) -> StepStats:
        import ray

        blob = pickle.dumps(list(episodes))
        stats: list[StepStats] = ray.get(
            [w.step.remote(blob, advantages_E_L) for w in self.workers])
        return stats[0]

    def state_dict(self) -> dict[str, torch.Tensor]:
        import ray

        parts = ray.get([w.state_dict.remote() for w in self.workers])
        sd: dict[str, torch.Tensor] = parts[0]
        return sd

    def save(self, root: Path, state: TrainerState, *, source_dir: Path | None,
             keep: int) -> Path:
        """checkpoint.py's layout (HF weights, trainer_state.json) plus the DCP shards;
        written to a temporary sibling and renamed into place, as there."""
        import ray

        from swarmrl_server.trainer import checkpoint
        from swarmrl_server.trainer.distributed import SHARDED_DIR

        root.mkdir(parents=True, exist_ok=True)
        final = root / f"step-{state.step}"
        tmp = Path(tempfile.mkdtemp(prefix=f".step-{state.step}-", dir=root))
        try:
            sd = self.state_dict()
            ray.get([w.save.remote(str(tmp)) for w in self.workers])
            _save_hf(source_dir, tmp, sd)
            (tmp / checkpoint.STATE_FILE).write_text(json.dumps(asdict(state), indent=1))
            assert (tmp / SHARDED_DIR).is_dir()
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        checkpoint.prune(root, keep)
        return final

    def load(self, path: Path) -> TrainerState:
        import ray

        from swarmrl_server.trainer import checkpoint

        ray.get([w.load.remote(str(path)) for w in self.workers])
        return checkpoint.load_state(path)

    def close(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for w in self.workers:
            ray.kill(w)
        remove_placement_group(self.pg)


def _save_hf(source_dir: Path | None, out: Path, state_dict: dict[str, torch.Tensor]) -> None:
    """The full weights as an HF checkpoint (servable with --model), tokenizer included."""
    from swarmrl_server.models import load_model
    from swarmrl_server.trainer.checkpoint import _TOKENIZER_FILES

    assert source_dir is not None
    model, _ = load_model(source_dir)
    model.load_state_dict(state_dict, strict=False)
    model.save_pretrained(out, safe_serialization=True)
    for name in _TOKENIZER_FILES:
        if (source_dir / name).is_file() and not (out / name).exists():
            shutil.copy2(source_dir / name, out / name)
