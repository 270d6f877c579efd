"""Data-parallel, sharded training with PyTorch FSDP2 (`fully_shard`) over torch.distributed.

N worker processes each hold a shard of the model and the AdamW state. A step:

1. every worker receives the same batch (episode rows + advantages, computed once over
   the whole batch so groups are compared across workers);
2. each takes its share: `balance_by_tokens` deals episodes largest-first to the worker
   with the fewest tokens so far (deterministic, so every worker computes the same split
   without talking);
3. `StepRunner` (step.py) trains the share with the *global* sizes and `dp_size=N`; the
   workers' gradients are averaged by FSDP2's reduce-scatter. step.py's docstring shows
   why this gives exactly the one-process gradient;
4. the step's sums are merged, so every worker reports the whole step.

FSDP2 runs collectives inside forward and backward: every worker must run the same
number of them or the group hangs. Shares differ in micro-batches, and a micro-batch's
forward may call the model several times (rows of different lengths, tree packing). So
an update unshards every module once up front (one all-gather each, same on every
worker), keeps the parameters unsharded through the local micro-batches with gradient
sync off, then runs one 2-token zero-loss pass with sync on: the same single forward and
backward on every worker, whose reduce-scatter carries the accumulated gradients.

Backend by device: gloo on CPU (tested here), NCCL on CUDA (NOT TESTED in CI: no GPU).

Checkpoints: `save_sharded` writes the model and optimizer shards with
torch.distributed.checkpoint (DCP). DCP reshards on load, so a checkpoint written by N
workers resumes on M workers; a checkpoint without shards (written by the one-process
trainer) is refused with a clear error.

LoRA (`lora_rank > 0`): every worker wraps its model before sharding; frozen base and
trained adapter share the FSDP2 units, only the adapter has gradients and AdamW state.
Syncs and checkpoints gather and write the adapter alone (`ignore_frozen_params`), and
the KL reference is the policy with its adapter off, as in one process.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from swarmrl_server.trainer import lora
from swarmrl_server.trainer.config import TrainerConfig
from swarmrl_server.trainer.device import Placement
from swarmrl_server.trainer.setup import build_optimizer, build_policy, grammar_for, reference_for
from swarmrl_server.trainer.step import EpisodeRows, StepRunner, StepStats, forward_for

if TYPE_CHECKING:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

SHARDED_DIR = "sharded"
"""Sub-directory of a checkpoint that holds the DCP shards."""
_META = "sharded_meta.json"


class ShardedCheckpointError(ValueError):
    """A checkpoint cannot be resumed by a sharded trainer."""


def backend_for(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def balance_by_tokens(episodes: Sequence[EpisodeRows], world_size: int) -> list[list[int]]:
    """Each worker's episode indices (ascending), balanced by forward tokens: largest
    episode first to the worker with the fewest tokens so far (ties: lowest rank)."""
    loads = [0] * world_size
    shares: list[list[int]] = [[] for _ in range(world_size)]
    for i in sorted(range(len(episodes)), key=lambda i: (-episodes[i].num_tokens, i)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shares[rank].append(i)
        loads[rank] += episodes[i].num_tokens
    return [sorted(s) for s in shares]


def _fsdp_modules(model: torch.nn.Module) -> list[Any]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


@dataclass
class FsdpDataParallel:
    """This worker's place in the group, and the group operations a step needs
    (`step.DataParallel`)."""

    rank: int
    world_size: int

    def share(self, episodes: Sequence[EpisodeRows]) -> list[int]:
        return balance_by_tokens(episodes, self.world_size)[self.rank]

    def begin_accumulation(self, model: torch.nn.Module) -> None:
        for m in _fsdp_modules(model):
            m.set_reshard_after_forward(False, recurse=False)
            m.set_reshard_after_backward(False, recurse=False)
            m.set_requires_gradient_sync(False, recurse=False)
        for m in _fsdp_modules(model):
            m.unshard()

    def finish_accumulation(
        self, model: torch.nn.Module, pad_id: int, placement: Placement
    ) -> None:
        for m in _fsdp_modules(model):
            m.set_reshard_after_forward(True, recurse=False)
            m.set_reshard_after_backward(True, recurse=False)
            m.set_requires_gradient_sync(True, recurse=False)
        ids_1_2 = torch.full((1, 2), pad_id, dtype=torch.long, device=placement.device)
        with placement.autocast():
            logits = model(input_ids=ids_1_2).logits
        (logits.float().sum() * 0.0).backward()

    def merge(self, stats: StepStats) -> StepStats:
        """The step's totals over all workers (times and peak memory: the slowest/largest)."""
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, stats)
        out = StepStats(grad_norm=stats.grad_norm, updates=stats.updates,
                        workers=self.world_size)
        for s in gathered:
            out.loss += s.loss
            out.pg_loss += s.pg_loss
            out.entropy += s.entropy
            out.kl_ref += s.kl_ref
            out.tokens_trained += s.tokens_trained
            out.tokens_forward += s.tokens_forward
            out.micro_batches += s.micro_batches
            for k, v in s.verl.items():
                out.verl[k] = out.verl.get(k, 0.0) + v
            out.forward_backward_s = max(out.forward_backward_s, s.forward_backward_s)
            out.optimizer_s = max(out.optimizer_s, s.optimizer_s)
            out.peak_memory_mb = max(out.peak_memory_mb, s.peak_memory_mb)
        return out


def shard_model(model: torch.nn.Module, device: torch.device) -> None:
    """FSDP2: every decoder layer is its own unit (all-gathered one at a time), then the
    root (embeddings, norm, head). Parameters stay fp32: the master weights."""
    from torch.distributed.fsdp import fully_shard

    model.to(device)
    layers = [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)


def _options(model: torch.nn.Module, *, full: bool = False) -> StateDictOptions:
    """DCP state-dict options: under LoRA only the trained (adapter) parameters, so neither
    a sync nor a checkpoint gathers or writes the frozen base. `full`: the whole dict on
    every worker, on CPU (a weight sync's)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(ignore_frozen_params=lora.is_lora(model), full_state_dict=full,
                            cpu_offload=full)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights on CPU (a collective: every worker must call it; all get the
    full dict); under LoRA the adapter's alone, under peft's saved names."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    sd = get_model_state_dict(model, options=_options(model, full=True))
    tensors = {k: v for k, v in sd.items() if isinstance(v, torch.Tensor)}
    return lora.adapter_tensors(model, tensors) if lora.is_lora(model) else tensors


def save_sharded(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Writes this group's model and optimizer shards under `path/sharded` (collective)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    msd, osd = get_state_dict(model, optimizer, options=_options(model))
    dcp_save({"model": msd, "optim": osd}, checkpoint_id=str(path / SHARDED_DIR))
    if dist.get_rank() == 0:
        (path / SHARDED_DIR / _META).write_text(
            json.dumps({"world_size": dist.get_world_size()}))
    dist.barrier()


def load_sharded(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Loads shards written by any number of workers (DCP reshards); returns that number."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load

    meta = path / SHARDED_DIR / _META
    if not meta.is_file():
        raise ShardedCheckpointError(
            f"checkpoint {path} has no sharded state ({SHARDED_DIR}/): it was written by a "
            "one-process trainer (workers=1), whose optimizer state a sharded trainer cannot "
            "resume; resume it with workers=1, or start the sharded run from its weights "
            "(--model " + str(path) + ") without --resume")
    msd, osd = get_state_dict(model, optimizer, options=_options(model))
    state: dict[str, Any] = {"model": msd, "optim": osd}
    dcp_load(state, checkpoint_id=str(path / SHARDED_DIR))
    set_state_dict(model, optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"], options=_options(model))
    return int(json.loads(meta.read_text())["world_size"])


class TrainerWorker:
    """One data-parallel worker: a shard of the model and optimizer, and its StepRunner.

    The same class runs in a `torch.multiprocessing` process (tests) or as a Ray actor
    (`scale/workers.py`). Every method is a collective: call it on all workers.
    """

    def __init__(
        self, rank: int, world_size: int, master_addr: str, master_port: int,
        model_path: str, config: dict[str, Any], *, forward: str = "auto",
    ) -> None:
        self.config = TrainerConfig(**config)
        self.placement = Placement.for_option(self.config.device)
        if self.placement.device.type == "cuda" and self.placement.device.index is None:
            local = int(os.environ.get("LOCAL_RANK", "0"))
            self.placement = Placement(torch.device("cuda", local), self.placement.bf16)
            torch.cuda.set_device(self.placement.device)
        os.environ.setdefault("MASTER_ADDR", master_addr)
        os.environ.setdefault("MASTER_PORT", str(master_port))
        if not dist.is_initialized():
            dist.init_process_group(
                backend_for(self.placement.device), rank=rank, world_size=world_size,
                init_method=f"tcp://{master_addr}:{master_port}",
                timeout=timedelta(minutes=10))
        self.rank, self.world_size = rank, world_size
        policy = build_policy(Path(model_path), self.config, placement=None)
        shard_model(policy.model, self.placement.device)
        self.model = policy.model
        self.optimizer = build_optimizer(policy.model, self.config)
        self.runner = StepRunner(
            policy.model, self.optimizer, self.config, pad_id=policy.pad_id,
            forward=forward_for(forward == "tree" or (forward == "auto" and self.config.packing)),
            placement=self.placement, dp=FsdpDataParallel(rank, world_size),
            **reference_for(policy, Path(model_path), self.config, self.placement),
            **grammar_for(Path(model_path), self.config))

    def step(self, episodes_blob: bytes, advantages_E_L: torch.Tensor) -> StepStats:
        """One training step on the whole batch (pickled EpisodeRows; each takes its share)."""
        episodes: list[EpisodeRows] = pickle.loads(episodes_blob)
        return self.runner.run(episodes, advantages_E_L)

    def state_dict(self, *, on_rank0_only: bool = True) -> dict[str, torch.Tensor] | None:
        sd = full_state_dict(self.model)
        return sd if (self.rank == 0 or not on_rank0_only) else None

    def save(self, path: str) -> None:
        save_sharded(Path(path), self.model, self.optimizer)

    def load(self, path: str) -> int:
        return load_sharded(Path(path), self.model, self.optimizer)

    def ping(self) -> int:
        return self.rank

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
