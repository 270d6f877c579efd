"""Roles: a two-role environment against a real in-process server serving three LoRA
adapters of the tiny model on one hf base ("a", "b", and "base", never trained).

Each role's calls land in its own model's episodes, ended with its own reward, and train
that model; a frozen role's episodes are aborted, never trained; self-play (two seats on
one adapter) gives each seat its own group ids, so the server's own grouping
(`make_groups`) never puts one seat's rewards in the other's baseline; an evaluation holds
every role's model under one holder, and episodes ended meanwhile train neither model
until it ends."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import swarmrl
from swarmrl.envs import (
    Environment,
    Item,
    Outcome,
    RoleSpec,
    Rollout,
    Runner,
    RunnerConfig,
    Split,
    parse_roles,
)
from swarmrl.envs._roles import parse_role
from swarmrl_server.app import RunningServer
from swarmrl_server.config import ModelSpec
from swarmrl_server.trainer.batching import make_groups
from tests.helpers import REPO, assert_eventually
from tests.server_fixtures import ServerFactory
from tests.store_support import stored_episode

TRAIN = {"lora_rank": "8", "lora_alpha": "16", "batch_rule": "groups", "group_size": "2",
         "batch_size": "1", "lr": "5e-2", "progress": "false", "checkpoint_every": "0",
         "checkpoint_on_stop": "false", "kl_coef": "0.01"}


class Relay(Environment):
    """A proposer writes, a solver answers what it wrote; each role's reward is its own
    (the proposer's: its reply's length; the solver's: 10 + its reply's length), so a
    reward in the wrong role's episode is seen."""

    name = "relay"
    roles = ("proposer", "solver")

    def items(self, split: Split) -> list[Item]:
        n = {"train": 4, "val": 2, "test": 1}[split]
        return [Item(f"{split}{i}", {"split": split, "i": i}) for i in range(n)]

    async def play(self, rollout: Rollout) -> Outcome:
        p = await rollout.chat([{"role": "user", "content": "say a number"}],
                               role="proposer", max_tokens=3)
        s = await rollout.chat([{"role": "user", "content": f"repeat: {p.text}"}],
                               role="solver", max_tokens=2)
        return Outcome(rewards={"proposer": float(len(p.completion_ids)),
                                "solver": 10.0 + len(s.completion_ids)}, success=True)


class Seats(Relay):
    roles = ("first", "second")

    async def play(self, rollout: Rollout) -> Outcome:
        rewards = {}
        for seat, bonus in (("first", 0.0), ("second", 100.0)):
            c = await rollout.chat([{"role": "user", "content": f"{seat} move"}],
                                   role=seat, max_tokens=2)
            rewards[seat] = bonus + len(c.completion_ids)
        return Outcome(rewards=rewards)


@pytest.fixture
async def adapters(make_server: ServerFactory) -> RunningServer:
    return await make_server(
        models=tuple(ModelSpec(n, "tiny", engine="hf") for n in ("a", "b", "base")),
        train=TRAIN)


def _config(**roles: str) -> RunnerConfig:
    return RunnerConfig(group_size=2, concurrency=4, progress=False,
                        roles=parse_roles(f"{k}={v}" for k, v in roles.items()))


def test_role_syntax() -> None:
    assert parse_role("judge=base:frozen") == ("judge", RoleSpec("base", frozen=True))
    assert parse_role("solver=b") == ("solver", RoleSpec("b"))
    for bad in ("solver", "solver=", "=b", "solver=b:cold"):
        with pytest.raises(ValueError, match="--role"):
            parse_role(bad)
    with pytest.raises(ValueError, match="given twice"):
        parse_roles(["x=a", "x=b"])


async def test_unknown_role_is_refused(adapters: RunningServer) -> None:
    async with swarmrl.AsyncSwarmClient(adapters.grpc_target) as client:
        with pytest.raises(ValueError, match="judge: not a role"):
            Runner(Relay(), client, _config(judge="a"))
        frozen = _config(proposer="a:frozen", solver="base:frozen")
        async with Runner(Relay(), client, frozen) as runner:
            with pytest.raises(ValueError, match="every role of relay is frozen"):
                await runner.train(groups=1)


async def test_each_role_trains_its_own_adapter_on_its_own_reward(
        adapters: RunningServer) -> None:
    records: list[Any] = []
    async with swarmrl.AsyncSwarmClient(adapters.grpc_target) as client:
        async with Runner(Relay(), client, _config(proposer="a", solver="b"),
                          on_record=records.append) as runner:
            report = await runner.train(groups=2)
    assert report.groups == 2 and len(records) == 4 and all(r.trained for r in records)
    models = adapters.swarm.models
    await assert_eventually(lambda: _check(models["a"].trainer.policy_version >= 1
                                           and models["b"].trainer.policy_version >= 1),
                            timeout=180)
    assert models["base"].trainer.policy_version == 0
    for r in records:
        assert set(r.role_episodes) == {"proposer", "solver"}
        for role, model in (("proposer", "a"), ("solver", "b")):
            stored = await stored_episode(adapters, r.role_episodes[role])
            assert stored.reward == r.rewards[role]
            assert {c.model for c in stored.calls} == {model}
            assert stored.group_id == f"{r.group_id}:{role}"
    assert all(r.rewards["solver"] >= 10 > r.rewards["proposer"] for r in records)


async def test_a_frozen_roles_calls_are_never_trained(adapters: RunningServer) -> None:
    records: list[Any] = []
    async with swarmrl.AsyncSwarmClient(adapters.grpc_target) as client:
        async with Runner(Relay(), client, _config(proposer="a", solver="base:frozen"),
                          on_record=records.append) as runner:
            await runner.train(groups=2)
        models = adapters.swarm.models
        await assert_eventually(lambda: _check(models["a"].trainer.policy_version >= 1),
                                timeout=180)
        for r in records:
            solver = await client.get_episode(r.role_episodes["solver"])
            proposer = await client.get_episode(r.role_episodes["proposer"])
            assert (solver.state, proposer.state) == ("aborted", "ended")
    assert models["base"].trainer.policy_version == 0
    assert models["b"].trainer.policy_version == 0


async def test_self_play_seats_have_their_own_groups_and_rewards(
        adapters: RunningServer) -> None:
    records: list[Any] = []
    async with swarmrl.AsyncSwarmClient(adapters.grpc_target) as client:
        async with Runner(Seats(), client, _config(first="a", second="a"),
                          on_record=records.append) as runner:
            await runner.train(groups=2)
    models = adapters.swarm.models
    await assert_eventually(lambda: _check(models["a"].trainer.policy_version >= 1),
                            timeout=180)
    stored = {}
    for r in records:
        for seat in ("first", "second"):
            ep = await stored_episode(adapters, r.role_episodes[seat])
            assert ep.reward == r.rewards[seat] and {c.model for c in ep.calls} == {"a"}
            stored[ep.episode_id] = seat
    episodes = [await stored_episode(adapters, i) for i in stored]
    groups = make_groups(episodes, 2, "a")
    assert len(groups) == 4 and all(g.complete for g in groups)
    for g in groups:  # the server's own grouping: one seat per group, one seat's baseline
        assert len({stored[e.episode_id] for e in g.episodes}) == 1


class Flaky(Relay):
    """Two train items; the first rollout of train1 to finish fails after both roles
    called their models (its sibling plays cleanly)."""

    failed = False

    def items(self, split: Split) -> list[Item]:
        return super().items(split)[:2] if split == "train" else super().items(split)

    async def play(self, rollout: Rollout) -> Outcome:
        outcome = await super().play(rollout)
        if rollout.item.id == "train1" and not self.failed:
            self.failed = True
            raise RuntimeError("the environment broke")
        return outcome


async def test_a_failed_rollout_aborts_every_roles_episode_and_its_group(
        adapters: RunningServer) -> None:
    """A rollout failing for good aborts both roles' episodes, and the other rollout of its
    group (both roles) is aborted too: a group is trained whole or not at all, across
    roles. The healthy group ends both roles' episodes."""
    records: list[Any] = []
    async with swarmrl.AsyncSwarmClient(adapters.grpc_target) as client:
        config = RunnerConfig(group_size=2, concurrency=4, progress=False, retries=0,
                              roles=parse_roles(["proposer=a", "solver=b"]))
        async with Runner(Flaky(), client, config, on_record=records.append) as runner:
            report = await runner.train(groups=2)
        assert (report.groups, report.groups_aborted) == (1, 1)
        failed = [r for r in records if r.item_id == "train1"]
        assert sorted(r.ok for r in failed) == [False, True]  # one failed, one played
        for r in records:
            states = {(await client.get_episode(i)).state for i in r.role_episodes.values()}
            assert states == ({"aborted"} if r.item_id == "train1" else {"ended"}), r


async def test_an_evaluation_holds_every_roles_model(adapters: RunningServer) -> None:
    """Inside the hold, whole groups of both models end; neither model steps until the
    evaluation ends, then both do."""
    async with swarmrl.AsyncSwarmClient(adapters.grpc_target) as client:
        runner = Runner(Relay(), client, _config(proposer="a", solver="b"))
        async with runner:
            async with runner.pinned("val") as version:
                holds = (await client.status()).holds
                assert sorted(h.model for h in holds) == ["a", "b"]
                assert len({h.holder for h in holds}) == 1
                assert runner.pins == {"a": version, "b": 0}
                await runner.train(groups=1)  # both models' groups ended, held
                report = await runner.evaluate("val")
                models = adapters.swarm.models
                assert (models["a"].trainer.policy_version,
                        models["b"].trainer.policy_version) == (0, 0)
            assert report.policy_versions == [0]
            assert set(report.by_role()) == {"proposer", "solver"}
            assert all(set(r.model_versions) == {"a", "b"} for r in report.records)
            await assert_eventually(lambda: _check(
                models["a"].trainer.policy_version >= 1
                and models["b"].trainer.policy_version >= 1), timeout=180)


def _check(ok: bool) -> None:
    assert ok


@pytest.mark.slow
def test_swarmrl_train_with_roles_starts_one_base_with_an_adapter_per_role(
        tmp_path: Path, model_cache: Path) -> None:
    """The recipe's command on the tiny model: the started server serves each role's model
    as an adapter of one base; each evaluation pins (and checkpoints) both models; test is
    played on both restored; the card records each role's model and each version."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "swarmrl", "train", "examples.describe_guess.env:DescribeGuess",
         "--role-base", "tiny", "--role", "describer=describer", "--role", "guesser=guesser",
         "--env-arg", "n_val=3", "--env-arg", "n_test=2", "--groups", "4", "--group-size",
         "2", "--train-option", "batch_size=1", "--train-option", "batch_rule=groups",
         "--out", str(out), "--server-arg=--cache-dir", f"--server-arg={model_cache}",
         "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    card = json.loads((out / "card.json").read_text())
    assert card["roles"] == {
        "describer": {"model": "describer", "frozen": False, "adapter_of": "tiny"},
        "guesser": {"model": "guesser", "frozen": False, "adapter_of": "tiny"}}
    assert set(card["server"]["train_options"]) == {"describer", "guesser"}
    assert all(o["lora_rank"] == 16 and o["group_size"] == 2
               for o in card["server"]["train_options"].values())
    for e in card["evals"]:
        assert set(e["pinned_versions"]) == {"describer", "guesser"}
        assert set(e["checkpoints"]) == {"describer", "guesser"}
        assert set(e["figures"]["by_role"]) == {"describer", "guesser"}
    assert set(card["test"]["pinned_versions"]) == {"describer", "guesser"}
    rows = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    trained = [r for r in rows if r["trained"]]
    assert len(trained) == 8
    from tests.store_support import stored_episodes

    episodes = stored_episodes(out / "data")
    for r in trained:
        for role in ("describer", "guesser"):
            ep = episodes[r["role_episodes"][role]]
            assert ep.reward == r["rewards"][role]
            assert {c.model for c in ep.calls} == {role}


@pytest.mark.slow
@pytest.mark.vllm
async def test_each_role_trains_its_own_adapter_on_one_vllm_server(
        vllm_url: str, make_server: ServerFactory) -> None:
    """The same on a real `vllm serve --enable-lora`: one vLLM server serves both roles'
    adapters, and each role's calls train its own adapter on its own reward. (Names of
    their own: the session's vLLM server keeps the adapters other tests loaded.)"""
    running = await make_server(
        models=tuple(ModelSpec(n, "tiny", engine="vllm", urls=(vllm_url,)) for n in ("role-a", "role-b")),
        train=TRAIN)
    records: list[Any] = []
    async with swarmrl.AsyncSwarmClient(running.grpc_target) as client:
        async with Runner(Relay(), client, _config(proposer="role-a", solver="role-b"),
                          on_record=records.append) as runner:
            assert (await runner.train(groups=2)).groups == 2
    models = running.swarm.models
    await assert_eventually(lambda: _check(models["role-a"].trainer.policy_version >= 1
                                           and models["role-b"].trainer.policy_version >= 1),
                            timeout=300)
    for r in records:
        for role, model in (("proposer", "role-a"), ("solver", "role-b")):
            stored = await stored_episode(running, r.role_episodes[role])
            assert stored.reward == r.rewards[role]
            assert {c.model for c in stored.calls} == {model}


@pytest.mark.slow
async def test_swarmrl_eval_restores_every_roles_checkpoint_under_one_hold(
        adapters: RunningServer, tmp_path: Path) -> None:
    """`swarmrl eval --target --role-checkpoint MODEL=PATH ...`: each role's checkpoint
    is served again and the evaluation plays exactly those restored versions; the
    swapped pair (each adapter in the other's role) takes the same syntax."""
    async with swarmrl.AsyncSwarmClient(adapters.grpc_target) as client:
        async with Runner(Relay(), client, _config(proposer="a", solver="b")) as runner:
            await runner.train(groups=2)
        models = adapters.swarm.models
        await assert_eventually(lambda: _check(models["a"].trainer.policy_version >= 1
                                               and models["b"].trainer.policy_version >= 1),
                                timeout=180)
        held = [await client.hold_training(m, holder="t") for m in "ab"]
        paths = {m: (await client.save_checkpoint(m))[0] for m in "ab"}
        for h in held:
            await client.release_training(h.model, holder="t")
    out = tmp_path / "swapped"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "swarmrl", "eval", "tests.sdk.envs.test_envs_roles:Relay",
        "--target", adapters.grpc_target, "--role", "proposer=b", "--role", "solver=a",
        "--role-checkpoint", f"a={paths['a']}", "--role-checkpoint", f"b={paths['b']}",
        "--split", "val", "--out", str(out), "--no-progress", cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 300)
    assert proc.returncode == 0, err.decode()[-3000:]
    card = json.loads((out / "card.json").read_text())
    restored = {m: c["restored_as_version"] for m, c in card["checkpoints"].items()}
    assert card["evals"][0]["pinned_versions"] == {"b": restored["b"], "a": restored["a"]}
    assert card["roles"] == {"proposer": {"model": "b", "frozen": False},
                             "solver": {"model": "a", "frozen": False}}
    rows = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert rows and all(r["model_versions"] == {"a": [restored["a"]], "b": [restored["b"]]}
                        for r in rows)
