"""Ray placement (`swarmrl serve --ray`): the cluster, and trainer workers as Ray actors.

- Engine replicas: see `scale.replicas` (`--replicas N` actors per model behind a
  `scale.router.Router`).
- Trainer workers: `workers=N` (a train option) `TrainerWorker` actors (trainer/
  distributed.py) in a Ray placement group, one bundle of `worker_cpus`/`worker_gpus`
  each; rank 0's node gives the torch.distributed rendezvous address. `RayTrainerGroup`
  is what the trainer drives instead of its in-process `StepRunner`.

Without `--ray` none of this is imported and everything runs in one process.
The GPU resources (num_gpus per replica / worker) are NOT TESTED here (no GPU); the
same code runs with num_gpus=0 on the CPU test cluster.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import socket
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
import torch

if TYPE_CHECKING:
    from swarmrl_server.trainer.checkpoint import TrainerState
    from swarmrl_server.trainer.config import TrainerConfig
    from swarmrl_server.trainer.step import EpisodeRows, StepStats

log = structlog.get_logger("swarmrl.ray")

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
