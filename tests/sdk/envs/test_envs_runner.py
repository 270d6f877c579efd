"""The environment runner (`swarmrl.envs`) against a real server on the tiny model.

What it must hold: groups are ended whole (every rollout's reward on its own episode)
or aborted whole; a failed rollout is aborted and retried as a *fresh* episode, a
timed-out one aborted and counted; evaluation episodes are aborted and tagged with the versions that played
them; train items with a val or test item's content are never played; at most
`concurrency` rollouts play at once, and OpenAI clients made by rollouts share one
connection pool.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

import swarmrl
from swarmrl.envs import (
    Environment,
    Item,
    Outcome,
    Rollout,
    RolloutRecord,
    Runner,
    RunnerConfig,
    Split,
    load_environment,
    parse_env_args,
)
from tests.helpers import REPO


class Count(Environment):
    """Say a number; reward 1 for an even-length reply. Knobs make rollouts fail."""

    name = "count"

    def __init__(self, *, n_train: int = 12, fail_first: bool = False, always_fail: str = "",
                 sleep_s: float = 0.0, train_extra: Iterable[Item] = ()) -> None:
        self.n_train = n_train
        self.fail_first = fail_first
        self.always_fail = always_fail
        self.sleep_s = sleep_s
        self.train_extra = list(train_extra)
        self.playing = 0
        self.most_playing = 0
        self.played: list[tuple[str, str, int, str]] = []

    def items(self, split: Split) -> list[Item]:
        n = {"train": self.n_train, "val": 3, "test": 2}[split]
        base = {"train": 0, "val": 100, "test": 200}[split]
        items = [Item(f"{split}-{i}", {"n": base + i}, task=f"t{i % 2}") for i in range(n)]
        return items + (self.train_extra if split == "train" else [])

    async def play(self, rollout: Rollout) -> Outcome:
        self.playing += 1
        self.most_playing = max(self.most_playing, self.playing)
        try:
            self.played.append((rollout.item.id, rollout.split, rollout.attempt,
                                rollout.episode.id))
            c = await rollout.chat([{"role": "user", "content": f"say {rollout.item.data['n']}"}],
                                   max_tokens=3)
            if self.sleep_s:
                await asyncio.sleep(self.sleep_s)
            if rollout.item.id == self.always_fail or (self.fail_first and rollout.attempt == 0):
                raise RuntimeError("the environment broke")
            return Outcome(reward=float(len(c.completion_ids) % 2 == 0), success=len(c.text) > 3,
                           metrics={"tokens": float(len(c.completion_ids))})
        finally:
            self.playing -= 1


def not_an_environment() -> int:
    return 3


async def _infos(target: str, ids: Iterable[str]) -> dict[str, swarmrl.EpisodeInfo]:
    async with swarmrl.AsyncSwarmClient(target) as client:
        return {i: await client.get_episode(i) for i in ids}


async def _run(server: Any, env: Environment, config: RunnerConfig, *, groups: int = 0,
               evaluate: Split | None = None) -> tuple[list[RolloutRecord], Any]:
    records: list[RolloutRecord] = []
    async with swarmrl.AsyncSwarmClient(server.grpc_target) as client:
        async with Runner(env, client, config, on_record=records.append) as runner:
            result = (await runner.train(groups=groups) if groups
                      else await runner.evaluate(evaluate or "val"))
    return records, result


async def test_groups_are_ended_whole_with_each_rollouts_reward(http_server: Any) -> None:
    env = Count()
    records, report = await _run(http_server, env, RunnerConfig(group_size=3, concurrency=4,
                                                                progress=False), groups=4)
    assert report.groups == 4 and report.rollouts == 12 and report.groups_aborted == 0
    infos = await _infos(http_server.grpc_target, [r.episode_id for r in records])
    for r in records:
        assert r.trained and infos[r.episode_id].state == "ended"
        assert infos[r.episode_id].reward == r.reward
        assert infos[r.episode_id].num_calls == 1
        assert infos[r.episode_id].task_id == r.task
    by_group: dict[str, set[str]] = {}
    for r in records:
        by_group.setdefault(r.group_id, set()).add(r.item_id)
    assert len(by_group) == 4 and all(len(items) == 1 for items in by_group.values())
    assert all(len([r for r in records if r.group_id == g]) == 3 for g in by_group)
    assert env.most_playing <= 4


async def test_a_failed_rollout_is_aborted_and_retried_as_a_fresh_episode(http_server: Any) -> None:
    env = Count(fail_first=True)
    records, report = await _run(http_server, env, RunnerConfig(group_size=2, retries=1,
                                                                progress=False), groups=2)
    # Every first attempt failed; the retries are new episodes, and only they are ended.
    first = {ep for _, _, attempt, ep in env.played if attempt == 0}
    retried = {ep for _, _, attempt, ep in env.played if attempt == 1}
    assert len(first) == len(retried) == 4 and not first & retried
    infos = await _infos(http_server.grpc_target, first | retried)
    assert all(infos[e].state == "aborted" and "the environment broke" in infos[e].abort_reason
               for e in first)
    assert all(infos[e].state == "ended" for e in retried)
    assert {r.episode_id for r in records if r.trained} == retried
    assert report.groups == 2 and report.failed_attempts == 4


async def test_a_group_with_a_rollout_failing_for_good_is_aborted_whole(http_server: Any) -> None:
    env = Count(n_train=1, always_fail="train-0")
    records, report = await _run(http_server, env, RunnerConfig(group_size=3, retries=1,
                                                                progress=False), groups=1)
    assert report.groups == 0 and report.groups_aborted == 1
    infos = await _infos(http_server.grpc_target, [e for *_, e in env.played])
    assert len(infos) == 6  # 3 rollouts x 2 attempts, every one a fresh episode
    assert all(i.state == "aborted" for i in infos.values())
    assert not any(r.trained for r in records)


async def test_a_group_the_server_ended_first_is_counted_not_fatal(http_server: Any) -> None:
    """An episode the server aborted behind the runner's back (as a lapsed lease does)
    cannot be ended: its group counts as aborted and training goes on."""

    class Lapses(Count):
        async def play(self, rollout: Rollout) -> Outcome:
            outcome = await super().play(rollout)
            if rollout.item.id == "train-0":
                await rollout.episode.abort("as if its session's lease lapsed")
            return outcome

    records, report = await _run(http_server, Lapses(n_train=2), RunnerConfig(
        group_size=1, progress=False, seed=3), groups=4)
    assert report.groups_aborted == 2 and report.groups == 2
    failed = [r for r in records if r.item_id == "train-0"]
    assert failed and all(r.error.startswith("could not end") and not r.trained for r in failed)
    assert all(r.trained for r in records if r.item_id == "train-1")


async def test_a_rollout_past_its_timeout_is_aborted_counted_and_not_retried(
        http_server: Any) -> None:
    """A timeout is the policy's failure: retrying it until it passes would flatter the
    policy, so it is not retried; its group is aborted and the report counts it."""
    env = Count(n_train=1, sleep_s=5.0)
    records, report = await _run(http_server, env, RunnerConfig(
        group_size=1, retries=1, rollout_timeout_s=0.5, progress=False), groups=1)
    assert report.groups_aborted == 1 and len(env.played) == 1
    assert report.errors == {"timeout": 1} and report.as_dict()["errors"] == {"timeout": 1}
    assert records[0].error == "timed out" and records[0].kind == "timeout"
    info = (await _infos(http_server.grpc_target, [records[0].episode_id]))[records[0].episode_id]
    assert info.state == "aborted"


async def test_evaluation_is_aborted_and_names_its_policy_version(http_server: Any) -> None:
    env = Count()
    records, report = await _run(http_server, env, RunnerConfig(progress=False), evaluate="test")
    assert len(records) == 2 and {r.item_id for r in records} == {"test-0", "test-1"}
    infos = await _infos(http_server.grpc_target, [r.episode_id for r in records])
    assert all(i.state == "aborted" for i in infos.values())
    assert report.policy_versions == [0] and all(r.policy_versions == (0,) for r in records)
    figures = report.as_dict()
    assert figures["n"] == 2 and "success_ci95" in figures


async def test_train_items_with_held_out_content_are_never_played(http_server: Any) -> None:
    # Same content as val-1 and test-0 under other ids: caught by content, not by name.
    clones = [Item("copy-a", {"n": 101}, task="t1"), Item("copy-b", {"n": 200}, task="t0")]
    env = Count(n_train=2, train_extra=clones)
    records, report = await _run(http_server, env, RunnerConfig(group_size=1, progress=False),
                                 groups=6)
    assert {r.item_id for r in records} == {"train-0", "train-1"}
    assert report.skipped_held_out >= 2


def test_val_and_test_sharing_an_item_is_refused() -> None:
    class Leaky(Count):
        def items(self, split: Split) -> list[Item]:
            return [Item(f"{split}-0", {"n": 7})]

    runner = Runner(Leaky(), swarmrl.AsyncSwarmClient("127.0.0.1:1"))
    with pytest.raises(ValueError, match="val and test must not share items"):
        runner.held_out("val")


async def test_openai_clients_of_rollouts_share_one_pool(http_server: Any) -> None:
    """40 rollouts, each through its own OpenAI client (the episode's own base URL):
    the clients share the runner's pool, so connections stay at the concurrency."""
    import psutil

    class ViaOpenAI(Count):
        async def play(self, rollout: Rollout) -> Outcome:
            client = rollout.openai(max_retries=0)
            r = await client.chat.completions.create(
                model=rollout.model, messages=[{"role": "user", "content": "hi"}],
                **rollout.openai_sampling())
            return Outcome(reward=float(len(r.choices[0].message.content or "") % 2))

    port = int(http_server.openai_base_url.split(":")[-1].split("/")[0])
    seen: list[int] = []

    def connections() -> int:
        return sum(1 for c in psutil.Process().net_connections("tcp")
                   if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED")

    class Watched(ViaOpenAI):
        async def play(self, rollout: Rollout) -> Outcome:
            seen.append(connections())
            return await super().play(rollout)

    records, report = await _run(http_server, Watched(n_train=20), RunnerConfig(
        group_size=2, concurrency=4, sampling=swarmrl.SamplingParams(max_tokens=2),
        progress=False), groups=20)
    assert report.rollouts == 40 and all(r.trained for r in records)
    infos = await _infos(http_server.grpc_target, [r.episode_id for r in records])
    assert all(i.num_calls == 1 for i in infos.values())  # each call in its own episode
    assert max(seen) <= 4, seen


def test_env_specs_and_args() -> None:
    assert parse_env_args(["level=2", "name=abc", 'tasks=["a","b"]']) == {
        "level": 2, "name": "abc", "tasks": ["a", "b"]}
    env = load_environment("tests.sdk.envs.test_envs_runner:Count", {"n_train": 3})
    assert isinstance(env, Count) and env.n_train == 3
    with pytest.raises(ValueError, match="expected MODULE:ATTR"):
        load_environment("nocolon")
    with pytest.raises(ValueError, match="has no attribute 'Nope'"):
        load_environment("tests.sdk.envs.test_envs_runner:Nope")
    with pytest.raises(TypeError, match="not a swarmrl.envs.Environment"):
        load_environment("tests.sdk.envs.test_envs_runner:not_an_environment")


def test_a_module_in_the_working_directory_loads_without_it_on_sys_path(tmp_path: Path) -> None:
    """The `swarmrl` console script's sys.path lacks the working directory (unlike
    `python -m`): `swarmrl train mymod:Env` still finds `mymod.py` there, as uvicorn does.
    `python -P` starts without it, as a console script does."""
    (tmp_path / "mymod.py").write_text(
        "from swarmrl.envs import Environment\n"
        "class Env(Environment):\n"
        "    name = 'mine'\n"
        "    def __init__(self, n):\n        self.n = n\n"
        "    def items(self, split):\n        return []\n"
        "    async def play(self, rollout):\n        raise NotImplementedError\n")
    code = ("import sys; assert '' not in sys.path and sys.path[0] != '.'; "
            "from swarmrl.envs import load_environment; "
            "print(load_environment('mymod:Env', {'n': 5}).n)")
    proc = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "5"


@pytest.mark.slow
def test_swarmrl_train_runs_an_environment_file_end_to_end(tmp_path: Path,
                                                           model_cache: Path) -> None:
    """`swarmrl train FILE.py:Class` starts a training server, evaluates val, trains, and
    the trainer steps on exactly the ended episodes (never an evaluation's)."""
    import json

    env_file = tmp_path / "my_env.py"
    env_file.write_text(
        "from swarmrl.envs import Environment, Item, Outcome\n"
        "class Echo(Environment):\n"
        "    name = 'echo'\n"
        "    def items(self, split):\n"
        "        off = {'train': 0, 'val': 50, 'test': 80}[split]\n"
        "        return [Item(str(i), {'q': f'word {i}'}) for i in range(off, off + 4)]\n"
        "    async def play(self, rollout):\n"
        "        c = await rollout.chat([{'role': 'user', 'content': rollout.item.data['q']}])\n"
        "        return Outcome(reward=float(len(c.completion_ids)))\n")
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "swarmrl", "train", f"{env_file}:Echo", "--groups", "4",
         "--group-size", "2", "--max-tokens", "3", "--temperature", "1.0", "--out", str(out),
         "--train-option", "batch_size=2", "--train-option", "batch_rule=groups",
         "--server-arg=--cache-dir", f"--server-arg={model_cache}", "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    card = json.loads((out / "card.json").read_text())
    assert card["train"]["groups"] == 4
    assert [e["name"] for e in card["evals"]] == ["before", "after"]
    assert all(e["figures"]["n"] == 4 for e in card["evals"])
    rows = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    trained = {r["episode_id"] for r in rows if r["trained"]}
    evals = {r["episode_id"] for r in rows if r["split"] in ("val", "test")}
    assert len(trained) == 8 and len(evals) == 12 and not trained & evals
    from tests.store_support import trained_episode_ids

    consumed = trained_episode_ids(out / "data")
    assert consumed and consumed <= trained  # steps trained only ended training episodes
    assert (out / "data" / "metrics.jsonl").read_text().count("\n") >= 1


async def test_a_run_stops_when_the_server_it_started_dies(tmp_path: Path) -> None:
    """`swarmrl train` plays while the server it started lives: when that process dies
    (here a stand-in, SIGKILLed), play is cancelled at once, however long it would have
    run, and the command fails naming the server's log and how the server ended."""
    import signal

    from swarmrl.envs._cli import ServerExited, _while_alive
    from swarmrl.envs._server import ServerProcess as Started

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    server = Started("127.0.0.1:1", proc, tmp_path / "server.log")
    cancelled = asyncio.Event()

    async def play() -> None:  # a rollout stuck on a dead address
        try:
            await asyncio.sleep(600)
        finally:
            cancelled.set()

    asyncio.get_running_loop().call_later(0.5, proc.send_signal, signal.SIGKILL)
    with pytest.raises(ServerExited, match=r"the server exited during the run \(killed by "
                       r"SIGKILL\); see .*server\.log"):
        await asyncio.wait_for(_while_alive(server, play()), 30)
    assert cancelled.is_set()


async def test_a_cleanup_call_outlives_its_cancelled_caller_but_is_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An abort or a hold's release runs to its end when its caller is cancelled
    meanwhile, and gives up after `CLEANUP_S` when the server never answers."""
    from swarmrl.envs import _rollout

    released = asyncio.Event()

    async def release() -> None:
        await asyncio.sleep(0.2)
        released.set()

    caller = asyncio.create_task(_rollout.cleanup(release()))
    await asyncio.sleep(0.05)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.wait_for(released.wait(), 5)  # finished though its caller was cancelled
    monkeypatch.setattr(_rollout, "CLEANUP_S", 0.2)
    await asyncio.wait_for(_rollout.cleanup(asyncio.Event().wait()), 5)  # a dead server
