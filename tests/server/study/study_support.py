"""What the study tests share: a study file on the tiny model, `study run` as a process,
and readers of a run's records (run.json, metrics.jsonl, the store, the server log)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tests.helpers import REPO, wait_until


def write_study(tmp_path: Path, cache: Path, **changes: Any) -> Path:
    data: dict[str, Any] = {
        "name": "t",
        "server": {"flags": {"model": "tiny", "train": True, "default-max-tokens": 2,
                             "cache-dir": str(cache), "grace": 1},
                   "train_options": {"batch_rule": "episodes", "batch_size": 4, "lr": 1e-4,
                                     "checkpoint_every": 2, "progress": False,
                                     "max_staleness": 1000}},
        "clients": [{"name": "agent",
                     "command": ["{python}", "-m", "tests.server.study.agent", "--target", "{target}"]}],
        "variations": {"grid": {"client.agent.bias": [0.0, 1.0]}},
        "metric": {"name": "reward/mean", "direction": "max"},
        "budget": {"steps": 6, "wall_s": 300},
        "restarts": {"backoff_s": 0.2},
        **changes,
    }
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def study_cmd(path: Path, action: str = "run") -> subprocess.Popen[bytes]:
    log = open(path.parent / f"study-{action}.log", "ab")
    return subprocess.Popen([sys.executable, "-m", "swarmrl_server.study.cli", action, str(path)],
                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)


def run_json(path: Path, run_id: str) -> dict[str, Any]:
    f = path.parent / "study.study" / "runs" / run_id / "run.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def run_dir(path: Path, run_id: str) -> Path:
    return path.parent / "study.study" / "runs" / run_id


def finish(proc: subprocess.Popen[bytes], path: Path, timeout: float = 400) -> None:
    try:
        assert proc.wait(timeout=timeout) == 0, (path.parent / "study-run.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()


def steps_and_versions(data: Path) -> tuple[list[int], list[float], list[int]]:
    rows = [json.loads(line) for line in (data / "metrics.jsonl").read_text().splitlines()]
    db = sqlite3.connect(data / "swarm.sqlite3")
    issued = [v for (v,) in db.execute(
        "SELECT version FROM policy_versions WHERE model='tiny' ORDER BY rowid")]
    db.close()
    return [r["step"] for r in rows], [r["actor/policy_version"] for r in rows], issued


def assert_resumed_cleanly(data: Path) -> None:
    """Steps strictly increase, no policy version issued twice or trained twice."""
    steps, versions, issued = steps_and_versions(data)
    assert steps and all(a < b for a, b in zip(steps, steps[1:])), steps
    assert all(a < b for a, b in zip(versions, versions[1:])), versions
    assert len(set(issued)) == len(issued), issued


def server_log(path: Path, run_id: str, event: str) -> list[dict[str, Any]]:
    """The run's server log events named `event` ("launch": the supervisor's launch lines)."""
    lines = (run_dir(path, run_id) / "logs" / "server.log").read_text().splitlines()
    if event == "launch":
        return [{"line": line} for line in lines if line.startswith("--- ")]
    events = [json.loads(line) for line in lines if line.startswith("{")]
    return [e for e in events if e.get("event") == event]


def kill_when(path: Path, run_id: str, process: str, min_step: int) -> int:
    """SIGKILLs one of a run's processes once the run reached `min_step` (and a
    checkpoint exists); returns the pid."""
    def ready() -> bool:
        rec = run_json(path, run_id)
        ckpt = run_dir(path, run_id) / "data" / "checkpoints" / "tiny" / "step-2"
        return (rec.get("step", 0) >= min_step and process in rec.get("processes", {})
                and (process != "server" or ckpt.is_dir()))
    wait_until(ready, 300, f"{run_id} at step {min_step}")
    pid = run_json(path, run_id)["processes"][process]["pid"]
    os.kill(pid, signal.SIGKILL)
    return int(pid)
