"""LoRA adapters as engines serve them: the adapter value, and one model's view of a shared base.

A LoRA-trained model is a frozen base plus a small adapter. Several models may share one
base (`--model a=smollm2 --model b=smollm2 --train-option lora_rank=8`): the server then
holds ONE base engine (one copy of the weights on hf, one `vllm serve --enable-lora` on
vllm) and gives every model an `AdapterEngine`, an `Engine` that names its adapter in
each call (`SamplingParams.adapter`) and turns the trainer's weight push into an adapter
load. A sync therefore moves the adapter's megabytes, never the base.

Versions are per adapter: each model has its own trainer and policy version; the base
engine stamps every call with the version of the adapter that served it.

Version 0 is the untrained adapter, whose B matrices are zero (peft's default init), so
it computes exactly what the base computes: until its first load an adapter's calls are
served by the base itself (bit for bit the same logits), which needs no adapter on the
server at start.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import torch

from swarmrl_server.engine.base import (
    Engine,
    GenerationChunk,
    GenerationOutput,
    SamplingParams,
    SyncTimes,
)

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
"""peft's file names, which vLLM's `/v1/load_lora_adapter` also reads."""


@dataclass(frozen=True)
class LoraSpec:
    """The shape of a LoRA adapter (from the train options lora_rank, lora_alpha,
    lora_target_modules, lora_dropout)."""

    rank: int
    alpha: int
    target_modules: tuple[str, ...] = ("all-linear",)
    """Module names (q_proj, ...) or peft's "all-linear" (every linear layer but the head)."""
    dropout: float = 0.0

    def peft_config(self, base_model_path: str | None = None) -> Any:
        """The `peft.LoraConfig` (default init: B = 0, so the adapter starts as the base)."""
        from peft import LoraConfig

        targets: str | list[str] = (
            "all-linear" if self.target_modules == ("all-linear",) else list(self.target_modules))
        return LoraConfig(r=self.rank, lora_alpha=self.alpha, target_modules=targets,
                          lora_dropout=self.dropout, bias="none", task_type="CAUSAL_LM",
                          base_model_name_or_path=base_model_path)


LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""The --max-lora-rank values vLLM 0.32 accepts (vllm/config/lora.py MaxLoRARanks)."""


@dataclass(frozen=True)
class LoraSlots:
    """What a LoRA-serving vLLM server is launched for."""

    adapters: int
    """Models whose adapters it serves."""
    max_rank: int
    """The largest adapter rank among them."""


    def serve_args(self) -> list[str]:
        """Two versions of every adapter may run at once (calls finishing on the old one
        while new calls start on the new), hence 2 slots an adapter."""
        rank = next((r for r in LORA_RANKS if r >= self.max_rank), None)
        if rank is None:
            raise ValueError(f"lora_rank {self.max_rank} is above vLLM's largest ({LORA_RANKS[-1]})")
        return ["--enable-lora", "--max-loras", str(2 * self.adapters),
                "--max-lora-rank", str(rank)]


@dataclass(frozen=True)
class Adapter:
    """One version of an adapter: its spec and its tensors under peft's saved names
    (``base_model.model.<module>.lora_A.weight``, no adapter name)."""

    spec: LoraSpec
    tensors: Mapping[str, torch.Tensor] = field(repr=False)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def target_modules(self) -> list[str]:
        """The module names the tensors adapt (all-linear resolved, as vLLM needs them)."""
        return sorted({k.split(".lora_")[0].rsplit(".", 1)[-1] for k in self.tensors})

    def write(self, directory: Path, base_model_path: str | None = None) -> Path:
        """Writes peft's adapter layout into `directory`, which must not exist yet: a new
        directory per version (vLLM caches by path and prefix); written to a temporary
        sibling renamed into place, so a reader never sees half of it."""
        if directory.exists():
            raise FileExistsError(f"{directory} exists: every adapter version gets a new one")
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
        try:
            self.write_files(tmp, base_model_path)
            os.replace(tmp, directory)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return directory

    def write_files(self, directory: Path, base_model_path: str | None = None) -> None:
        """`adapter_config.json` and `adapter_model.safetensors` into `directory` (what
        `PeftModel.from_pretrained` and `vllm serve --lora-modules` read)."""
        from safetensors.torch import save_file

        config = self.spec.peft_config(base_model_path).to_dict()
        config["target_modules"] = self.target_modules()
        config["peft_type"] = "LORA"
        config["task_type"] = "CAUSAL_LM"
        (directory / ADAPTER_CONFIG).write_text(json.dumps(config, indent=1, default=str))
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in self.tensors.items()}
        save_file(tensors, str(directory / ADAPTER_WEIGHTS), metadata={"format": "pt"})


class AdapterServer(Protocol):
    """What a base engine offers its adapters (`HFEngine`, `VLLMEngine`)."""

    async def load_adapter(self, name: str, adapter: Adapter, policy_version: int, *,
                           interrupt: bool = False) -> None:
        """Serves `adapter` as `name` from now on; calls already running finish on the
        version they started with (and are stamped with it), or with `interrupt` continue
        on the new one from their next token (`engine.base`)."""

    def adapter_version(self, name: str) -> int:
        """The version of `name` serving new calls (0 before its first load)."""


class AdapterEngine(Engine):
    """One model's view of a shared base engine: its calls name its adapter, its weight
    pushes load that adapter. Starting and stopping the base is the first/last view's job:
    the base is started once and stopped when its last view stops."""

    def __init__(self, name: str, base: Engine, spec: LoraSpec, *, shared: list[AdapterEngine]
                 ) -> None:
        """`shared`: the list of every view over `base` (this one is appended)."""
        if not hasattr(base, "load_adapter"):
            raise ValueError(f"engine {type(base).__name__} cannot serve LoRA adapters")
        self.name = name
        self.base = base
        self.spec = spec
        self._serve_like(base)
        self.tokenizer = getattr(base, "tokenizer", None)
        self._shared = shared
        self._running = False
        shared.append(self)
        self.last_sync_bytes = 0
        """Bytes the last push moved (the adapter's tensors)."""

    @property
    def policy_version(self) -> int:
        return self._server.adapter_version(self.name)

    @property
    def _server(self) -> AdapterServer:
        return self.base  # type: ignore[return-value]

    async def start(self) -> None:
        if not any(v._running for v in self._shared):
            await self.base.start()
        self._running = True
        self.max_model_len = self.base.max_model_len

    async def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        if not any(v._running for v in self._shared):
            await self.base.stop()

    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncIterator[GenerationChunk | GenerationOutput]:
        return self.base.generate(prompt_ids, replace(params, adapter=self.name))

    async def update_weights(
        self, state_dict: Mapping[str, torch.Tensor], policy_version: int, *,
        interrupt: bool = False,
    ) -> None:
        """`state_dict` is the adapter's (the LoRA trainer pushes only that)."""
        adapter = Adapter(self.spec, state_dict)
        await self._server.load_adapter(self.name, adapter, policy_version, interrupt=interrupt)
        self.last_sync_bytes = adapter.nbytes

    @property
    def last_sync(self) -> SyncTimes | None:
        """The base engine's: it does the load."""
        return self.base.last_sync

    def __getattr__(self, item: str) -> Any:
        # Engine-specific extras (stats, servers, ...) are the base's.
        if item.startswith("_") or item == "base":
            raise AttributeError(item)
        return getattr(self.base, item)
