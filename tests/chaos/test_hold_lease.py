"""Chaos: a `swarmrl train` client SIGKILLed during a pinned evaluation does not stop
training on its server for good. Real processes, the tiny model.

A real `swarmrl serve --model tiny --train` runs; a real `swarmrl train` attaches to it
(--target) with a 3 s session lease and starts its "before" evaluation of val, pinned:
its hold of training is bound to its session. Its environment's val rollouts never end,
so the evaluation (and the hold) lasts as long as the client lives. While it does,
GetStatus lists the hold, and a group another client plays does not train. Then the
client is SIGKILLed: nothing renews its session, the session's lease lapses, the hold
lapses with it, and the waiting group trains (the policy version rises) within seconds.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import swarmrl
from tests.helpers import REPO, ServerProcess, wait_until

pytestmark = pytest.mark.slow

TRAIN = {"batch_rule": "groups", "group_size": "2", "batch_size": "1", "lr": "1e-3",
         "checkpoint_every": "0", "checkpoint_on_stop": "false", "progress": "false"}
LEASE_S = 3.0

ENV = '''
import asyncio
from swarmrl.envs import Environment, Item, Outcome

class Stalls(Environment):
    """Train rollouts answer at once; val rollouts call once, then never end."""

    def items(self, split):
        return [Item(f"{split}{i}", {"split": split}) for i in range(2)]

    async def play(self, rollout):
        await rollout.chat([{"role": "user", "content": "hi"}], max_tokens=2)
        if rollout.item.data["split"] == "val":
            await asyncio.Event().wait()
        return Outcome(reward=float(rollout.episode.id[-1] in "02468ace"))
'''


def _play_group(client: swarmrl.SwarmClient) -> None:
    """One group of two episodes with different rewards: a batch for the trainer."""
    for i in range(2):
        with client.episode(task_id="feed", group_id="feed-0") as ep:
            ep.chat([{"role": "user", "content": "go"}], max_tokens=2, seed=i)
            ep.reward(float(i))


def test_a_train_client_killed_while_it_holds_training_stops_it_for_one_lease(
        tmp_path: Path, model_cache: Path, tiny_model_dir: Path) -> None:
    args = ["--model", "tiny", "--train", "--default-max-tokens", "4"]
    for k, v in TRAIN.items():
        args += ["--train-option", f"{k}={v}"]
    server = ServerProcess(data_dir=tmp_path / "data", cache_dir=model_cache, extra=args).start()
    env_file = tmp_path / "stalls_env.py"
    env_file.write_text(ENV)
    log = open(tmp_path / "train.log", "w")  # noqa: SIM115 (the child's, closed below)
    train = subprocess.Popen(
        [sys.executable, "-m", "swarmrl", "train", f"{env_file}:Stalls", "--target", server.target,
         "--lease", str(LEASE_S), "--group-size", "2", "--max-tokens", "2", "--minutes", "10",
         "--no-progress", "--out", str(tmp_path / "run")],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        with swarmrl.SwarmClient(server.target) as client:
            def held() -> bool:
                assert train.poll() is None, (tmp_path / "train.log").read_text()[-4000:]
                return bool(client.status().holds)

            wait_until(held, timeout=180, what="the train client's pinned evaluation to hold")
            [hold] = client.status().holds
            assert hold.model == "tiny" and hold.session_id and "val" in hold.reason, hold
            pinned = client.status().models[0].policy_version
            _play_group(client)  # a batch, ready while the hold lasts: it does not train
            status = client.status()
            assert [h.holder for h in status.holds] == [hold.holder]
            assert status.models[0].policy_version == pinned

            train.send_signal(signal.SIGKILL)
            train.wait(timeout=30)
            killed = time.monotonic()
            wait_until(lambda: not client.status().holds, timeout=30,
                       what="the dead client's hold to lapse")
            lapsed_s = time.monotonic() - killed
            wait_until(lambda: client.status().models[0].policy_version > pinned, timeout=120,
                       what="training to go on after the hold lapsed")
            trained_s = time.monotonic() - killed
    finally:
        if train.poll() is None:
            train.kill()
            train.wait()
        log.close()
        server.stop()
    events = [json.loads(line) for line in server.log_path.read_text().splitlines()
              if line.startswith("{")]
    [lapse] = [e for e in events if e["event"] == "trainer_hold_lapsed"]
    print(f"\nhold lease: session lease {LEASE_S:g} s; the hold lapsed {lapsed_s:.1f} s and "
          f"a step landed {trained_s:.1f} s after the SIGKILL")
    assert (lapse["holder"], lapse["cause"]) == (hold.holder, "session")
    # The session's lease, the reaper's tick (0.5 s) and the trainer's poll (1 s), no more.
    assert lapsed_s < LEASE_S + 3.0
