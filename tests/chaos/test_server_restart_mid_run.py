"""Chaos: the swarm server SIGKILLed and restarted mid-run costs a `swarmrl train` run
the rollouts in flight, never the run. Real processes, the tiny model.

A real `swarmrl serve --model tiny --train` runs with a data dir (the "supervised"
server: this test restarts it, as a supervisor would, on the same port and data dir); a
real `swarmrl train --target` plays an environment against it. Once training rows are in
the run's ``rollouts.jsonl`` (a condition, not a sleep), the server is SIGKILLed and
started again. The run goes on (more training rows come after the restart), ends with
a card that holds a test evaluation, and leaves no episode open and no hold on the server.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

import swarmrl
from tests.envs_support import read_rollouts
from tests.helpers import REPO, ServerProcess, wait_until

pytestmark = pytest.mark.slow

TRAIN = {"batch_rule": "groups", "group_size": "2", "batch_size": "1", "lr": "1e-3",
         "checkpoint_every": "0", "checkpoint_on_stop": "false", "progress": "false"}
GROUPS = 24

ENV = '''
from swarmrl.envs import Environment, Item, Outcome

class Words(Environment):
    def items(self, split):
        off, n = {"train": (0, 8), "val": (100, 3), "test": (200, 3)}[split]
        return [Item(str(i), {"q": f"word {i}"}) for i in range(off, off + n)]

    async def play(self, rollout):
        c = await rollout.chat([{"role": "user", "content": rollout.item.data["q"]}])
        return Outcome(reward=float(len(c.completion_ids) % 2), success=len(c.text) > 4)
'''


def _train_rows(out: Path) -> list[dict]:
    path = out / "rollouts.jsonl"
    if not path.exists():
        return []
    return [r for r in read_rollouts(out) if r["split"] == "train"]


def _start(tmp_path: Path, model_cache: Path, env: str, *run: str
           ) -> tuple[ServerProcess, subprocess.Popen[bytes], Path, Path, IO[str]]:
    """A training server on a data dir, and `swarmrl train --target` it with `run`'s
    arguments on the environment `env` (its source): (server, the run's process, its
    --out, its log's path, its open log, which the caller closes)."""
    args = ["--model", "tiny", "--train", "--default-max-tokens", "4"]
    for k, v in TRAIN.items():
        args += ["--train-option", f"{k}={v}"]
    server = ServerProcess(data_dir=tmp_path / "data", cache_dir=model_cache, extra=args).start()
    env_file = tmp_path / "words_env.py"
    env_file.write_text(env)
    out = tmp_path / "run"
    log_path = tmp_path / "train.log"
    log = open(log_path, "w")  # noqa: SIM115 (the child's, closed by the caller)
    train = subprocess.Popen(
        [sys.executable, "-m", "swarmrl", "train", f"{env_file}:Words", "--target",
         server.target, "--group-size", "2", "--groups", str(GROUPS), "--max-tokens", "3",
         "--no-progress", "--out", str(out), *run],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    return server, train, out, log_path, log


def test_a_server_restarted_mid_run_costs_the_rollouts_in_flight_not_the_run(
        tmp_path: Path, model_cache: Path) -> None:
    server, train, out, log_path, log = _start(tmp_path, model_cache, ENV)
    try:
        def training() -> bool:
            assert train.poll() is None, log_path.read_text()[-4000:]
            return len(_train_rows(out)) >= 4

        wait_until(training, timeout=300, what="the run's first training rollouts")
        server.kill()
        before_restart = len(_train_rows(out))
        server.start()
        assert train.wait(timeout=600) == 0, log_path.read_text()[-4000:]
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
        log.close()
    try:
        rows = _train_rows(out)
        card = json.loads((out / "card.json").read_text())
        with swarmrl.SwarmClient(server.target) as client:
            status = client.status()
            states = {r["episode_id"]: client.get_episode(r["episode_id"]).state
                      for r in read_rollouts(out) if r["episode_id"]}
    finally:
        server.stop()
    assert before_restart < GROUPS * 2 and len(rows) > before_restart  # it went on
    assert card["test"]["figures"]["n"] == 3  # every test item counted
    assert card["train"]["groups"] + card["train"]["groups_aborted"] == GROUPS
    assert card["train"]["groups"] >= 1
    assert status.open_episodes == 0 and status.holds == []
    trained = {r["episode_id"] for r in rows if r["trained"]}
    assert trained and all(states[e] == "ended" for e in trained)
    assert all(s in ("ended", "aborted") for s in states.values())
    print(f"\nserver restart mid-run: {before_restart} training rollouts before the kill, "
          f"{len(rows)} in all; train {card['train']}")


SLOW_VAL_ENV = ENV.replace("class Words(Environment):", '''import asyncio

class Words(Environment):''').replace(
    '        c = await rollout.chat(', '''        if rollout.split == "val":
            await asyncio.sleep(1.0)  # an evaluation long enough to be caught in
        c = await rollout.chat(''')


def test_a_server_restarted_during_a_pinned_evaluation_plays_it_again(
        tmp_path: Path, model_cache: Path) -> None:
    """The server is SIGKILLed while the run holds it for a val evaluation after some
    training, and started again: the hold (in the server's memory) is gone, so what the
    evaluation played is not a figure of its pinned version. The run plays that
    evaluation again under a fresh hold (`PinLost`, its card says so), then ends with a
    card and a test evaluation, and leaves no episode open and no hold."""
    server, train, out, log_path, log = _start(tmp_path, model_cache, SLOW_VAL_ENV,
                                               "--eval-every", "2")
    try:
        with swarmrl.SwarmClient(server.target) as client:
            def evaluating_after_training() -> bool:
                assert train.poll() is None, log_path.read_text()[-4000:]
                status = client.status()
                if not status.holds or status.models[0].policy_version < 2:
                    return False
                card = json.loads((out / "card.json").read_text())  # replaced atomically
                return "test_started" not in card  # a val evaluation, not the test's hold

            wait_until(evaluating_after_training, timeout=300,
                       what="a pinned val evaluation after two training steps")
        server.kill()
        server.start()
        assert train.wait(timeout=600) == 0, log_path.read_text()[-4000:]
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
        log.close()
    try:
        card = json.loads((out / "card.json").read_text())
        with swarmrl.SwarmClient(server.target) as client:
            status = client.status()
    finally:
        server.stop()
    replayed = [e for e in card["evals"] if e.get("replayed_after")]
    assert len(replayed) == 1, [e["name"] for e in card["evals"]]
    assert "the server restarted during a pinned block" in replayed[0]["replayed_after"][0]
    assert replayed[0]["figures"]["policy_versions"] == [replayed[0]["pinned_version"]]
    assert card["test"]["figures"]["n"] == 3 and not card["test"].get("interrupted")
    assert status.open_episodes == 0 and status.holds == []
