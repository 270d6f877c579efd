"""Where a trainer's step runs: the device, its precision and what the step measures.

`device=cpu` is the path the trainer always had: fp32 everywhere, no autocast, so its
numbers are bit-for-bit what they were. `device=cuda` keeps the model's parameters
(the master weights) and the AdamW state in fp32 and runs the forward under bf16
autocast: matmuls in bf16, reductions (log-softmax, the loss) in fp32, gradients land
in fp32 on the fp32 parameters. `device=auto` is cuda when torch sees a GPU.

The step's tensors are created by many small helpers (timelines, gather, verl's loss);
rather than thread a device through each of them, the step runs inside
`torch.device(...)` as a context, which makes every factory call (`torch.tensor`,
`torch.full`, `torch.arange`, ...) allocate on the step's device.

CUDA PATH: NOT TESTED IN CI (the project machine has no GPU); `benchmarks/gpu_check.py`
exercises it on a GPU machine. The CPU path is what the tests run.
"""

from __future__ import annotations

import contextlib
import resource
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import torch

# The device rule lives in `choices`, below config (which validates the option with it).
from swarmrl_server.trainer.choices import DeviceError
from swarmrl_server.trainer.choices import resolve_device as resolve


@dataclass(frozen=True)
class Placement:
    """A step's device and precision."""

    device: torch.device
    bf16: bool = False
    """bf16 autocast of the forward (fp32 master weights and optimizer state); cuda only."""

    @classmethod
    def for_option(cls, option: str, *, bf16: bool = True) -> Placement:
        device = resolve(option)
        return cls(device, bf16=bf16 and device.type == "cuda")

    @property
    def is_cpu(self) -> bool:
        return self.device.type == "cpu"

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """The whole step: factory calls allocate on the device (a no-op on the CPU)."""
        if self.is_cpu:
            yield
            return
        with torch.device(self.device):
            yield

    def autocast(self) -> contextlib.AbstractContextManager[object]:
        """Around forwards: bf16 autocast on cuda when asked, nothing otherwise."""
        if self.bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def reset_peak(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_memory_mb(self) -> float:
        """Peak allocated GPU memory since `reset_peak` (cuda), or the process's peak RSS
        (cpu: the OS keeps only a lifetime peak)."""
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device) / 2**20
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss / 2**20 if sys.platform == "darwin" else rss / 1024

    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


CPU = Placement(torch.device("cpu"))


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """HF gradient checkpointing (non-reentrant: works with autocast and FSDP2)."""
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if enable is None:
        raise DeviceError(f"{type(model).__name__} does not support gradient checkpointing")
    enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "use_cache"):
        config.use_cache = False  # a KV cache is useless in training and clashes with recompute
