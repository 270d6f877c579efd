"""The two-model example: its game's rewards, and a short smoke run of the whole thing
(server, OpenAI-client solver process, SDK proposer process swapped for an edited copy)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from examples.proposer_solver import game
from tests.helpers import REPO


def test_each_model_is_scored_on_its_own_part() -> None:
    assert game.proposer_reward("apple", "Red.") == 1.0
    assert game.proposer_reward("apple", "yellow") == 0.0
    assert game.question_color("apple", "red") == "red"
    # A wrong clue is corrected: the solver's question always has the hidden fruit as answer.
    assert game.question_color("apple", "yellow") == "red"
    assert game.question_color("apple", "horse") == "red"
    # The solver is right or wrong about the question it got, whatever the proposer did.
    assert game.solver_reward("yellow", "banana") == 1.0
    assert game.solver_reward("yellow", "apple") == 0.0


@pytest.mark.slow
def test_smoke_run(tmp_path: Path, model_cache: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "examples.two_models", "--out", str(out), "--episodes", "32",
         "--sft-steps", "2", "--minutes", "2"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "SWARMRL_CACHE": str(model_cache)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["failed_episodes"] == 0
    assert summary["episodes_by_agent_version"] == {"proposer/1": 16, "proposer/2": 16}
    assert summary["proposer"]["train_steps"] >= 1 and summary["solver"]["train_steps"] >= 1
    assert (out / "reward.png").stat().st_size > 0
    # Both versions were listed by `swarmrl status` at the end, the swapped-out one too.
    assert "proposer/1" in done.stdout and "proposer/2" in done.stdout
