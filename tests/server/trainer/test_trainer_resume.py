"""Checkpoint → SIGKILL → `swarmrl serve --resume` trains the same next step as a run
that was never interrupted (same seed, same episodes)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import ServerProcess, wait_until
from tests.trainer_support import current_logprobs, make_episode, multi_turn_calls, write_episodes

OPTIONS = {"batch_rule": "groups", "batch_size": "1", "group_size": "4", "lr": "1e-3",
           "checkpoint_every": "1", "checkpoint_on_stop": "false", "progress": "false",
           "seed": "7", "max_staleness": "100"}


def batch(model: torch.nn.Module, name: str, t0: float) -> list:  # type: ignore[type-arg]
    rng = random.Random(name)
    return [make_episode(f"{name}{i}", r, current_logprobs(model, multi_turn_calls(f"{name}{i}", rng)),
                         group_id=name, end_time=t0 + i)
            for i, r in enumerate([1.0, 0.0, 0.5, 0.0])]


def server(data: Path, cache: Path, *extra: str, port: int | None = None) -> ServerProcess:
    args = ["--model", "tiny", "--train"]
    for k, v in OPTIONS.items():
        args += ["--train-option", f"{k}={v}"]
    return ServerProcess(data_dir=data, cache_dir=cache, port=port, extra=[*args, *extra])


def step_dir(data: Path, step: int) -> Path:
    return data / "checkpoints" / "tiny" / f"step-{step}"


def wait_for_checkpoint(data: Path, step: int, proc: ServerProcess) -> None:
    wait_until(lambda: (step_dir(data, step) / "trainer_state.json").is_file()
               or proc.proc.poll() is not None, 120, f"checkpoint step-{step}")  # type: ignore[union-attr]
    assert (step_dir(data, step) / "trainer_state.json").is_file(), proc.log_path.read_text()[-3000:]


@pytest.mark.slow
def test_checkpoint_kill_resume_gives_the_same_next_step(
    tmp_path: Path, model_cache: Path, tiny_model_dir: Path
) -> None:
    from swarmrl_server.models import load_model

    model, _ = load_model(tiny_model_dir)
    first, second = batch(model, "a", 100.0), batch(model, "b", 200.0)

    # Uninterrupted: both batches are there from the start; two steps.
    data_a = tmp_path / "a" / "data"
    data_a.mkdir(parents=True)
    write_episodes(data_a / "swarm.sqlite3", first + second)
    a = server(data_a, model_cache).start()
    try:
        wait_for_checkpoint(data_a, 2, a)
    finally:
        a.stop()

    # Interrupted: step 1, checkpoint, SIGKILL; the second batch arrives while it is down;
    # `--resume` continues from the checkpoint.
    data_b = tmp_path / "b" / "data"
    data_b.mkdir(parents=True)
    write_episodes(data_b / "swarm.sqlite3", first)
    b = server(data_b, model_cache).start()
    try:
        wait_for_checkpoint(data_b, 1, b)
    finally:
        b.kill()
    write_episodes(data_b / "swarm.sqlite3", second)
    resumed = server(data_b, model_cache, "--resume", str(data_b), port=b.port).start()
    try:
        wait_for_checkpoint(data_b, 2, resumed)
    finally:
        resumed.stop()

    for name in ("a", "b"):
        state = json.loads((step_dir(data_a if name == "a" else data_b, 2) / "trainer_state.json").read_text())
        assert (state["step"], state["policy_version"]) == (2, 2)
        assert sorted(state["consumed"]) == sorted(e.episode_id for e in first + second)
    weights_a = load_file(str(step_dir(data_a, 2) / "model.safetensors"))
    weights_b = load_file(str(step_dir(data_b, 2) / "model.safetensors"))
    assert weights_a.keys() == weights_b.keys()
    changed = load_file(str(step_dir(data_b, 1) / "model.safetensors"))
    assert any(not torch.equal(weights_b[k], changed[k]) for k in weights_b)  # step 2 did train
    for key in weights_a:
        torch.testing.assert_close(weights_a[key], weights_b[key], rtol=0, atol=0)  # bit for bit
    opt_a = torch.load(step_dir(data_a, 2) / "optimizer.pt", weights_only=False)
    opt_b = torch.load(step_dir(data_b, 2) / "optimizer.pt", weights_only=False)
    for i, st in opt_a["state"].items():
        torch.testing.assert_close(st["exp_avg"], opt_b["state"][i]["exp_avg"], rtol=0, atol=1e-9)
    loss = [[json.loads(line)["loss/total"] for line in (d / "metrics.jsonl").read_text().splitlines()]
            for d in (data_a, data_b)]
    assert loss[0][-1] == pytest.approx(loss[1][-1], abs=1e-7)
