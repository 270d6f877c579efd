"""`RayGroup`: a trainer's `WorkerGroup` (trainer/workers.py) as N FSDP2 `TrainerWorker`
actors (`workers=N`, `swarmrl serve --ray`); `start_group` is the group factory the app
hands the trainers when it places on Ray.

The workers (distributed.py) sit in one Ray placement group, one bundle of
`worker_cpus`/`worker_gpus` each; rank 0's node gives the torch.distributed rendezvous
address. The controller sends every worker the whole batch (each takes its share) and
reads the weights back from rank 0.

Without `workers > 1` none of this is imported. The GPU resources (num_gpus per worker)
are NOT TESTED here (no GPU); the same code runs with num_gpus=0 on the CPU test cluster.
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
from typing import Any

import structlog
import torch

from swarmrl_server.engine.adapter import Adapter
from swarmrl_server.models import load_model
from swarmrl_server.scale.cluster import on_loopback
from swarmrl_server.timelines.flops import ModelShape
from swarmrl_server.trainer import checkpoint, lora
from swarmrl_server.trainer.config import TrainerConfig
from swarmrl_server.trainer.distributed import SHARDED_DIR, TrainerWorker
from swarmrl_server.trainer.step import EpisodeRows, StepStats
from swarmrl_server.trainer.workers import LocalGroup, WorkerGroup

log = structlog.get_logger("swarmrl.ray")


def start_group(path: Path, config: TrainerConfig) -> WorkerGroup:
    """The group `config.workers` asks for: Ray actors for more than one worker, the
    trainer's own process for one (blocks until the workers hold the model)."""
    return RayGroup(path, config) if config.workers > 1 else LocalGroup(path, config)


def _rendezvous(loopback: bool) -> tuple[str, int]:
    """Runs on the rank-0 bundle's node: its address and a free port there."""
    import ray

    host = "127.0.0.1" if loopback else ray.util.get_node_ip_address()
    with socket.socket() as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
    return host, port


class RayGroup:
    """N FSDP2 `TrainerWorker` actors in one placement group (a `workers.WorkerGroup`)."""

    def __init__(self, model_path: Path, config: TrainerConfig) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        from transformers import AutoConfig, AutoModelForCausalLM

        self.config = config
        self.model_path = model_path
        n = config.workers
        bundle = {"CPU": config.worker_cpus, **({"GPU": config.worker_gpus}
                                                 if config.worker_gpus else {})}
        self.pg = placement_group([dict(bundle) for _ in range(n)], strategy="PACK")
        ray.get(self.pg.ready(), timeout=300)

        def on(i: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(placement_group=self.pg,
                                                    placement_group_bundle_index=i)

        addr, port = ray.get(ray.remote(_rendezvous).options(
            num_cpus=0, scheduling_strategy=on(0)).remote(on_loopback()))
        cls = ray.remote(TrainerWorker)
        # Ray types an actor handle's methods as the class's own (no `.remote`) unless each
        # is decorated with @ray.method, which would import Ray into the trainer: the
        # handles are Any at that boundary.
        self.workers: list[Any] = [
            cls.options(num_cpus=config.worker_cpus, num_gpus=config.worker_gpus,
                        scheduling_strategy=on(i))
            .remote(i, n, addr, port, str(model_path), config.to_dict())
            for i in range(n)]
        ray.get([w.ping.remote() for w in self.workers])
        with torch.device("meta"):  # the model's shape, for metrics; no weights here
            self.shape = ModelShape.from_model(AutoModelForCausalLM.from_config(
                AutoConfig.from_pretrained(model_path, local_files_only=True)))
        log.info("trainer_workers_started", workers=n, rendezvous=f"{addr}:{port}")

    def step(self, episodes: Sequence[EpisodeRows], advantages_E_L: torch.Tensor) -> StepStats:
        import ray

        blob = pickle.dumps(list(episodes))
        stats: list[StepStats] = ray.get(
            [w.step.remote(blob, advantages_E_L) for w in self.workers])
        return stats[0]

    def weights(self) -> dict[str, torch.Tensor]:
        import ray

        parts = ray.get([w.state_dict.remote() for w in self.workers])
        sd: dict[str, torch.Tensor] = parts[0]
        return sd

    def save(self, root: Path, state: checkpoint.TrainerState, *, source_dir: Path | None,
             keep: int) -> Path:
        """checkpoint.py's layout (HF weights or the LoRA adapter, trainer_state.json) plus
        the DCP shards;
        written to a temporary sibling and renamed into place, as there."""
        import ray

        root.mkdir(parents=True, exist_ok=True)
        final = root / f"step-{state.step}"
        tmp = Path(tempfile.mkdtemp(prefix=f".step-{state.step}-", dir=root))
        try:
            sd = self.weights()
            ray.get([w.save.remote(str(tmp)) for w in self.workers])
            spec = lora.spec_for(self.config)
            if spec is not None:  # the adapter in peft's layout, as one process writes it
                Adapter(spec, sd).write_files(tmp, str(source_dir))
            else:
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

    def load(self, path: Path) -> checkpoint.TrainerState:
        import ray

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
    assert source_dir is not None
    model, _ = load_model(source_dir)
    model.load_state_dict(state_dict, strict=False)
    model.save_pretrained(out, safe_serialization=True)
    for name in checkpoint.TOKENIZER_FILES:
        if (source_dir / name).is_file() and not (out / name).exists():
            shutil.copy2(source_dir / name, out / name)
