"""Chaos: training while clients and the server are SIGKILLed and the network drops
and stalls connections. Loopback only, bounded in time, seeded.

Three client processes play episodes through a TCP proxy of our own (which drops a
quarter of the connections, at once or mid-way, and stalls others) against a training
server. A driver SIGKILLs and restarts clients every ~2 s and SIGKILLs the server every
~9 s, restarting it alternately plainly and with --resume. Then, from the data dir:

- every episode a client saw ended is in the store, ended;
- no policy version was issued twice: the versions the trainer announced step after
  step, over every launch (the metrics log is appended to, never rewritten), strictly
  increase, and each is in the durable version log;
- every call the server served carries a version that the version log had issued
  before the call was made (or the base weights, 0);
- the episodes trained more than once are exactly those of the steps lost to crashes,
  as the server counted them (recoveries log);
- metrics steps strictly increase.
"""

from __future__ import annotations

import json
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.chaos.proxy import ChaosProxy
from tests.helpers import REPO, ServerProcess

pytestmark = pytest.mark.slow

TRAIN = {"batch_rule": "groups", "batch_size": "8", "group_size": "1", "lr": "1e-4",
         "checkpoint_every": "2", "checkpoint_on_stop": "false", "progress": "false",
         "max_staleness": "1000", "seed": "1"}
CLIENTS = 3
BUDGET_S = 130.0
SERVER_EVERY_S = 9.0
CLIENT_EVERY_S = 2.0


def test_chaos(tmp_path: Path, model_cache: Path, tiny_model_dir: Path) -> None:
    rng = random.Random(12)
    data = tmp_path / "data"
    args = ["--model", "tiny", "--train", "--default-max-tokens", "4"]
    for k, v in TRAIN.items():
        args += ["--train-option", f"{k}={v}"]
    server = ServerProcess(data_dir=data, cache_dir=model_cache, extra=args).start()
    proxy = ChaosProxy(server.port, seed=3).start()
    logs = [tmp_path / f"agent-{i}.log" for i in range(CLIENTS)]

    def spawn(i: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.chaos.agent", f"127.0.0.1:{proxy.port}",
             str(logs[i]), f"a{i}"], cwd=REPO, stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / f"agent-{i}.err", "ab"))

    agents = [spawn(i) for i in range(CLIENTS)]
    client_kills = server_kills = 0
    started = time.monotonic()
    next_server_kill = started + SERVER_EVERY_S
    try:
        while time.monotonic() - started < BUDGET_S and (client_kills < 22 or server_kills < 5):
            time.sleep(CLIENT_EVERY_S * rng.uniform(0.5, 1.5))
            i = rng.randrange(CLIENTS)
            agents[i].send_signal(signal.SIGKILL)
            agents[i].wait()
            client_kills += 1
            agents[i] = spawn(i)
            if time.monotonic() >= next_server_kill and server_kills < 5:
                server.kill()
                server_kills += 1
                # Alternate a plain restart and --resume: both must continue, not rewind.
                server.extra = args + (["--resume", str(data)] if server_kills % 2 else [])
                # A log per launch: the helper's offset into a shared log counts bytes.
                server.log_path = tmp_path / f"server-{server_kills}.log"
                server.start()
                next_server_kill = time.monotonic() + SERVER_EVERY_S
        for a in agents:
            a.send_signal(signal.SIGKILL)
            a.wait()
        time.sleep(2.0)  # the trainer catches up with what just ended
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
        server.stop()
        proxy.stop()

    ended_by_clients = {line.strip() for p in logs if p.exists()
                        for line in p.read_text().splitlines() if line.strip()}
    db = sqlite3.connect(data / "swarm.sqlite3")
    states = dict(db.execute("SELECT episode_id, state FROM episodes"))
    lost = [e for e in ended_by_clients if states.get(e) != "ended"]
    versions = db.execute("SELECT version, created_at FROM policy_versions WHERE model='tiny' "
                          "ORDER BY version").fetchall()
    issued_at = dict(versions)
    calls = db.execute("SELECT call_id, policy_version, created_at FROM calls").fetchall()
    bad_calls = [c for c in calls if c[1] != 0 and not (c[1] in issued_at
                                                        and issued_at[c[1]] <= c[2])]
    log_rows = db.execute("SELECT episode_id, COUNT(*) FROM consumed_log WHERE model='tiny' "
                          "GROUP BY episode_id").fetchall()
    consumed_now = {e for (e,) in db.execute("SELECT episode_id FROM consumed WHERE model='tiny'")}
    trained_again = sum(n - 1 for _, n in log_rows) + sum(
        1 for e, _ in log_rows if e not in consumed_now)
    counted = db.execute("SELECT COALESCE(SUM(retrained_episodes), 0), COUNT(*) "
                         "FROM recoveries WHERE model='tiny'").fetchone()
    lost_steps = db.execute("SELECT COALESCE(SUM(lost_to - lost_from + 1), 0) FROM recoveries "
                            "WHERE lost_to > 0").fetchone()[0]
    step_rows = [json.loads(line) for line in (data / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in step_rows]
    # The versions issued, as each launch reported them (a rewound or reused number repeats).
    announced = [int(r["actor/policy_version"]) for r in step_rows]
    dropped_share = proxy.dropped / max(proxy.connections, 1)

    print(f"\nchaos: {client_kills} client kills, {server_kills} server kills, "
          f"{proxy.dropped}/{proxy.connections} connections dropped ({dropped_share:.0%}), "
          f"{proxy.stalled} stalled; {len(ended_by_clients)} episodes ended by clients, "
          f"{len(lost)} lost; {len(versions)} versions issued ({len(announced)} announced), "
          f"{len(calls)} calls checked, "
          f"{len(bad_calls)} with a version not issued before them; {len(steps)} steps "
          f"(last {steps[-1] if steps else None}), {lost_steps} steps lost in {counted[1]} "
          f"recoveries; episodes trained again {trained_again}, counted {counted[0]}")
    assert client_kills >= 20 and server_kills >= 5
    assert dropped_share >= 0.10
    assert ended_by_clients and not lost
    assert announced and all(a < b for a, b in zip(announced, announced[1:])), announced
    assert set(announced) <= set(issued_at), sorted(set(announced) - set(issued_at))
    assert not bad_calls, bad_calls[:5]
    assert trained_again == counted[0]
    assert steps and all(a < b for a, b in zip(steps, steps[1:])), steps
