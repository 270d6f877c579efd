"""`swarmrl study run --ray-address`: a run as a Ray job on a real (one-node) Ray cluster,
submitted through Ray's Job Submission API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers import REPO, free_port, wait_until
from tests.server.study.study_support import finish, run_json, write_study

pytestmark = pytest.mark.slow


@pytest.fixture
def ray_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """`ray start --head --block` on free ports; yields the dashboard (job API) address.
    Teardown stops exactly the processes that this head started."""
    ray = Path(sys.executable).parent / "ray"
    dashboard = free_port()
    ports = {"--port": free_port(), "--dashboard-port": dashboard,
             "--dashboard-agent-listen-port": free_port(),
             "--dashboard-agent-grpc-port": free_port(), "--metrics-export-port": free_port(),
             "--runtime-env-agent-port": free_port(), "--ray-client-server-port": free_port()}
    args = [str(ray), "start", "--head", "--block", "--num-cpus", "2",
            "--dashboard-host", "127.0.0.1", "--disable-usage-stats",
            *[a for k, v in ports.items() for a in (k, str(v))]]
    # Token auth (Ray's default where ~/.ray/auth_token exists), for the head and for
    # every client of this test: the job API, `study run` and its jobs. The token is this
    # test's own file: `ray start` never creates one (only `ray.init` does), so on a fresh
    # machine a token mode without it stops the head.
    from ray._private.authentication.authentication_token_generator import (
        generate_new_authentication_token,
    )

    token = tmp_path / "ray-auth-token"
    token.write_text(generate_new_authentication_token())
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    # Ray reads its auth mode once per process and caches it: an earlier test that imported
    # ray (verl does) would leave this process's job client sending no token (401s).
    from ray._private.authentication_test_utils import reset_auth_token_state

    reset_auth_token_state()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(args, stdout=open(tmp_path / "ray.log", "wb"),
                            stderr=subprocess.STDOUT, env=env)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        from ray.job_submission import JobSubmissionClient

        def up() -> bool:
            assert head.poll() is None, (tmp_path / "ray.log").read_text()[-2000:]
            try:
                JobSubmissionClient(address).list_jobs()
            except Exception:
                return False
            return True
        wait_until(up, 180, "the Ray head's job API")
        yield address
    finally:
        family = [head.pid] + [p.pid for p in psutil.Process(head.pid).children(recursive=True)]
        for pid in reversed(family):
            try:
                psutil.Process(pid).terminate()
            except psutil.NoSuchProcess:
                pass
        # Some of them never exit on SIGTERM (the wait always ran out, 30 s a run): a few
        # seconds to exit cleanly, then SIGKILL.
        _, alive = psutil.wait_procs([p for p in map(_proc, family) if p], timeout=5)
        for p in alive:
            p.kill()
        # Back to this process's own Ray auth settings: Ray caches them, and a later
        # `ray.init` here would start its cluster with a new token but send this one.
        monkeypatch.undo()
        reset_auth_token_state()


def _proc(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def test_study_runs_as_ray_jobs(tmp_path: Path, model_cache: Path, tiny_model_dir: Path,
                                ray_cluster: str) -> None:
    from ray.job_submission import JobSubmissionClient

    path = write_study(tmp_path, model_cache, variations={}, budget={"steps": 2})
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmrl_server.study.cli", "run", str(path),
         "--ray-address", ray_cluster],
        cwd=REPO, stdout=open(tmp_path / "study-run.log", "ab"), stderr=subprocess.STDOUT)
    finish(proc, path)
    rec = run_json(path, "s0-r00")
    assert rec["state"] == "done" and rec["step"] >= 2, rec
    assert rec["job_id"] == "study-t-s0-r00-1"
    jobs = {j.submission_id: j for j in JobSubmissionClient(ray_cluster).list_jobs()}
    assert str(jobs["study-t-s0-r00-1"].status.value) == "SUCCEEDED"
    assert "done (budget: 2 steps" in JobSubmissionClient(ray_cluster).get_job_logs(
        "study-t-s0-r00-1")
    rows = (path.parent / "study.study" / "runs" / "s0-r00" / "data" / "metrics.jsonl")
    assert [json.loads(line)["step"] for line in rows.read_text().splitlines()] == [1, 2]
