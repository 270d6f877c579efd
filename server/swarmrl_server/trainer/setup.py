"""Where a trainer's model and optimizer are built: the one place every worker group
(in-process or one FSDP2 shard per Ray actor) gets them from.

The seams: `build_policy` loads the weights to train (the place to wrap them, e.g. in
adapters), `build_optimizer` decides which parameters AdamW updates (those that require
grad), `build_reference` loads the frozen model of the KL penalty. Checkpoints
(`checkpoint.py`, `distributed.save_sharded`) save and load whatever these built, and
`WorkerGroup.weights()` is what the engines are sent.

LoRA (`lora_rank > 0`, trainer/lora.py): `build_policy` wraps the model in a fresh adapter,
so only the adapter requires grad (and gets AdamW state); the KL reference is then the
policy itself with the adapter off (`reference_for`), not a second copy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from swarmrl_server.models import load_model
from swarmrl_server.timelines.grammar import GrammarReplay
from swarmrl_server.trainer import lora
from swarmrl_server.trainer.config import TrainerConfig
from swarmrl_server.trainer.config import options_per_model as options_per_model
from swarmrl_server.trainer.device import Placement, enable_gradient_checkpointing


@dataclass
class Policy:
    """The model being trained, on its device and in train mode, and its pad token."""

    model: torch.nn.Module
    pad_id: int


def build_policy(path: Path, config: TrainerConfig, placement: Placement | None) -> Policy:
    """Loads the weights at `path` (seeded, fp32 master weights), with gradient
    checkpointing when asked. `placement=None` leaves the model on the CPU for a caller
    that places it itself (FSDP2 shards it onto the device)."""
    torch.manual_seed(config.seed)
    model, tokenizer = load_model(path)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if placement is not None:
        model.to(placement.device)  # type: ignore[arg-type]
    if config.grad_checkpointing:
        enable_gradient_checkpointing(model)
    model = lora.wrap(model, config, base_path=path)
    model.train()
    return Policy(model, int(pad))


def reference_for(policy: Policy, path: Path, config: TrainerConfig, placement: Placement
                  ) -> dict[str, Any]:
    """The StepRunner arguments of the KL reference: none without kl_coef; under LoRA the
    policy with its adapter off; else a frozen copy of the initial weights."""
    if config.kl_coef == 0:
        return {}
    if lora.is_lora(policy.model):
        return {"ref_model": policy.model, "ref_context": lora.reference}
    return {"ref_model": build_reference(path, placement)}


def grammar_for(path: Path, config: TrainerConfig) -> dict[str, Any]:
    """The StepRunner argument that replays constrained calls' grammars into forward masks
    (none when they train as context: their rows then carry no grammar spans; whether the
    forward uses it is `StepRunner._masks`'s decision)."""
    if not config.trains_constrained:
        return {}
    return {"grammar": GrammarReplay.for_model(path)}


def build_reference(path: Path, placement: Placement) -> torch.nn.Module:
    """The frozen initial model the KL penalty compares with."""
    ref, _ = load_model(path)
    ref.requires_grad_(False)
    ref.to(placement.device)  # type: ignore[arg-type]
    return ref


def build_optimizer(model: torch.nn.Module, config: TrainerConfig) -> torch.optim.Optimizer:
    """AdamW over the parameters that require grad (all of them, for full fine-tuning)."""
    return torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=config.lr,
        weight_decay=config.weight_decay, betas=(config.adam_beta1, config.adam_beta2))
