"""The README's main command, shortened: the loop runs end to end on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import REPO


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_demo_trains_serves_new_weights_and_writes_its_outputs(tmp_path: Path, model_cache: Path) -> None:
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--out", str(out), "--rl-episodes", "96",
         "--rl-minutes", "2",
         "--sft-steps", "30", "--clients", "2", "--cache-dir", str(model_cache)],
        cwd=REPO, capture_output=True, text=True, timeout=400,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "mean reward: first fifth" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] > 50 and summary["failed_episodes"] == 0
    assert summary["train_steps"] > 0 and summary["policy_version"] >= summary["train_steps"]
    assert (out / "reward.png").stat().st_size > 10_000
    assert any((out / "data" / "tb" / "quiz").iterdir())
    # The weights the server ended with differ from the ones it started from.
    (final,) = sorted((out / "data" / "checkpoints" / "quiz").glob("step-*"))[-1:]
    start = load_file(str(next(out.glob("sft-tiny0-*")) / "model.safetensors"))
    end = load_file(str(final / "model.safetensors"))
    assert any(not torch.equal(start[k], end[k]) for k in start)
    # Every episode the clients logged came from a policy version the server served.
    versions = {v for p in (out / "clients").glob("*.jsonl") for line in p.read_text().splitlines()
                for v in json.loads(line).get("policy_versions", [])}
    assert max(versions) > 0
