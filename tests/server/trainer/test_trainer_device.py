"""The device option: cpu is today's path, cuda is refused clearly without a GPU, and every
step reports tokens/s and peak memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from swarmrl_server.trainer.config import TrainerConfig, TrainerConfigError
from swarmrl_server.trainer.device import CPU, Placement, resolve
from swarmrl_server.trainer.step import StepRunner
from tests.trainer_support import fresh_model, two_episode_group


def test_auto_is_cpu_without_a_gpu_and_cuda_is_refused() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal cannot be shown here")
    assert resolve("auto") == torch.device("cpu")
    with pytest.raises(TrainerConfigError, match="sees no CUDA GPU"):
        TrainerConfig.from_options({"device": "cuda"})
    with pytest.raises(TrainerConfigError, match="not one of"):
        TrainerConfig.from_options({"device": "tpu"})


def test_grad_checkpointing_with_packing_is_refused() -> None:
    with pytest.raises(TrainerConfigError, match="grad_checkpointing"):
        TrainerConfig.from_options({"grad_checkpointing": "true", "packing": "true"})
    with pytest.raises(TrainerConfigError, match="reference model"):
        TrainerConfig.from_options({"workers": "2", "kl_coef": "0.1"})


def test_cpu_placement_is_todays_step_and_logs_speed_and_memory(tiny_model_dir: Path) -> None:
    results = []
    for placement in (CPU, Placement.for_option("cpu", bf16=True)):
        m = fresh_model(tiny_model_dir)
        good, bad = two_episode_group(m)
        config = TrainerConfig.from_options({"group_size": "0", "lr": "1e-3"})
        r = StepRunner(m, torch.optim.AdamW(m.parameters(), lr=1e-3), config, pad_id=3,
                       placement=placement)
        stats = r.run([good, bad])
        results.append([p.detach().clone() for p in m.parameters()])
        metrics = stats.to_metrics()
        assert metrics["perf/tokens_per_s"] > 0 and metrics["perf/peak_memory_mb"] > 10
    assert not placement.bf16  # bf16 is a GPU-only option
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_gradient_checkpointing_gives_the_same_step(tiny_model_dir: Path) -> None:
    from swarmrl_server.trainer.device import enable_gradient_checkpointing

    results = []
    for checkpointing in (False, True):
        m = fresh_model(tiny_model_dir)
        if checkpointing:
            enable_gradient_checkpointing(m)
        good, bad = two_episode_group(m)
        config = TrainerConfig.from_options({"group_size": "0", "grad_clip": "0"})
        stats = StepRunner(m, torch.optim.SGD(m.parameters(), lr=1.0), config,
                           pad_id=3).run([good, bad])
        results.append((stats.grad_norm, [p.detach().clone() for p in m.parameters()]))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-5)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
