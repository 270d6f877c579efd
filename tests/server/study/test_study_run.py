"""`swarmrl study run` end to end on the tiny model: real servers and clients as
processes, SIGKILLed from outside; a killed `study run` resumed; the planner hook
behind a real OpenAI-compatible HTTP endpoint."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.helpers import wait_until
from tests.server.study.study_support import (
    assert_resumed_cleanly,
    finish,
    kill_when,
    run_dir,
    run_json,
    server_log,
    study_cmd,
    write_study,
)

pytestmark = pytest.mark.slow


def test_study_heals_a_killed_server_and_a_crashed_client(
        tmp_path: Path, model_cache: Path, tiny_model_dir: Path) -> None:
    path = write_study(tmp_path, model_cache, seeds=[1, 2], concurrency=2,
                       budget={"steps": 8, "wall_s": 300})
    proc = study_cmd(path)
    try:
        # Both at once, each when its run gets there: waiting for one first let the other
        # run finish (its agent gone) before it was killed, on a loaded machine.
        with ThreadPoolExecutor(2) as pool:
            kills = [pool.submit(kill_when, path, "s0-r00", "server", 2),  # after step-2's
                     pool.submit(kill_when, path, "s0-r01", "agent#0", 1)]  # checkpoint
            for kill in kills:
                kill.result()
        finish(proc, path)
    finally:
        if proc.poll() is None:
            proc.kill()
    runs = {r: run_json(path, r) for r in ("s0-r00", "s0-r01", "s0-r02", "s0-r03")}
    assert all(r["state"] == "done" and r["step"] >= 8 for r in runs.values()), runs
    killed = [x for x in runs["s0-r00"]["restarts"] if x["what"] == "server"]
    assert len(killed) == 1 and "SIGKILL" in killed[0]["reason"], runs["s0-r00"]["restarts"]
    crashed = [x for x in runs["s0-r01"]["restarts"] if x["what"] == "agent#0"]
    assert len(crashed) == 1 and "SIGKILL" in crashed[0]["reason"], runs["s0-r01"]["restarts"]
    data = run_dir(path, "s0-r00") / "data"
    assert_resumed_cleanly(data)
    resumed = server_log(path, "s0-r00", "trainer_resumed")
    assert len(resumed) == 1 and resumed[0]["step"] >= 2 and "/step-" in resumed[0]["checkpoint"]
    report = (path.parent / "study.study" / "report" / "report.md").read_text()
    ranking = report.split("## Ranking")[1].split("## Runs")[0]
    assert ranking.index("client.agent.bias=1.0") < ranking.index("client.agent.bias=0.0")
    assert "(n=2)" in ranking
    restarts = report.split("## Restarts")[1].split("## Planner")[0]
    assert "| s0-r00 | server |" in restarts and "| s0-r01 | agent#0 |" in restarts
    assert (path.parent / "study.study" / "report" / "metric.png").stat().st_size > 0
    assert (path.parent / "study.study" / "report" / "report.html").is_file()


def test_killed_study_run_resumes_and_skips_finished_runs(
        tmp_path: Path, model_cache: Path, tiny_model_dir: Path) -> None:
    path = write_study(tmp_path, model_cache, concurrency=1)
    first = study_cmd(path)
    try:
        wait_until(lambda: run_json(path, "s0-r00").get("state") == "done"
                   and run_json(path, "s0-r01").get("step", 0) >= 2, 300, "run 2 under way")
        # The default server command is forked from study run's preloaded forkserver
        # (swarmrl_server.launch), not spawned.
        server = psutil.Process(run_json(path, "s0-r01")["processes"]["server"]["pid"])
        forkserver = server.parent()
        assert forkserver is not None and forkserver.ppid() == first.pid
        assert "forkserver" in " ".join(forkserver.cmdline())
    finally:
        first.send_signal(signal.SIGKILL)  # no clean-up at all: its children live on
        first.wait()
    done_before = run_json(path, "s0-r00")
    orphan = run_json(path, "s0-r01")["processes"]["server"]["pid"]
    assert psutil.pid_exists(orphan)
    finish(study_cmd(path), path)
    assert run_json(path, "s0-r00") == done_before  # never touched again
    assert len(server_log(path, "s0-r00", "launch")) == 1
    assert len(server_log(path, "s0-r01", "launch")) == 2
    second = run_json(path, "s0-r01")
    assert second["state"] == "done" and second["step"] >= 6
    assert [x["what"] for x in second["restarts"]] == ["study"]
    assert not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == "zombie"
    assert_resumed_cleanly(run_dir(path, "s0-r01") / "data")
    assert len(server_log(path, "s0-r01", "trainer_resumed")) == 1


@pytest.fixture
def scripted_model() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """An OpenAI-compatible endpoint (FastAPI + uvicorn) that replies with one valid and
    one invalid proposal; yields its base URL and the requests it got."""
    import uvicorn
    from fastapi import FastAPI

    app, seen = FastAPI(), []
    reply = {"proposals": [
        {"overrides": {"client.agent.bias": 2.0}, "why": "more bias, more reward"},
        {"overrides": {"train.learning_rate": 0.1}, "why": "a made-up option"}]}

    @app.post("/v1/chat/completions")
    async def chat(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(body)
        return {"id": "c1", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": "```json\n" + json.dumps(reply) + "\n```"}}]}

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning",
                                           log_config=None))  # leave logging as the suite set it
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 30, "the scripted model")
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1", seen
    server.should_exit = True
    thread.join(10)


def test_planner_runs_a_valid_proposal_and_logs_a_refused_one(
        tmp_path: Path, model_cache: Path, tiny_model_dir: Path,
        scripted_model: tuple[str, list[dict[str, Any]]]) -> None:
    base_url, seen = scripted_model
    # The base run (rewards 0 and 0.5) breaks its reward floor and is stopped; the planner's
    # (2 and 2.5) runs to its budget.
    path = write_study(tmp_path, model_cache, variations={}, budget={"steps": 2},
                       stop_rules={"reward_floor": {"value": 1.0, "after_steps": 1}},
                       planner={"base_url": base_url, "model": "scripted", "stages": 1})
    finish(study_cmd(path), path)
    assert len(seen) == 1 and seen[0]["model"] == "scripted"
    shown = json.loads(seen[0]["messages"][1]["content"])
    assert [r["run_id"] for r in shown["runs"]] == ["s0-r00"]
    assert shown["runs"][0]["state"] == "stopped" and shown["runs"][0]["final_metric"] < 1.0
    assert "stop rule reward_floor" in shown["runs"][0]["reason"]
    study = json.loads((path.parent / "study.study" / "study.json").read_text())
    assert study["stages"] == [["s0-r00"], ["s1-r01"]]
    good, bad = study["proposals"]
    assert good["accepted"] and good["reason"] == "runs s1-r01"
    assert not bad["accepted"] and "unknown train option 'learning_rate'" in bad["reason"]
    planned = run_json(path, "s1-r01")
    assert planned["state"] == "done" and planned["overrides"] == {"client.agent.bias": 2.0}
    assert planned["origin"] == "planner"
    report = (path.parent / "study.study" / "report" / "report.md").read_text()
    proposals = report.split("## Planner proposals")[1]
    assert "client.agent.bias=2.0 | yes | runs s1-r01" in proposals
    assert "train.learning_rate=0.1 | no |" in proposals and "learning_rate" in proposals
