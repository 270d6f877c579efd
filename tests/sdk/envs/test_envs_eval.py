"""Evaluation you can trust: pinned versions while training goes on, test played once on
the best checkpoint by val, run cards that repeat their run.

The pinning test makes the race it guards against happen on purpose: each evaluation
rollout makes a call, then waits until the served version moves past that call's, then
calls again. Unpinned (`pin=False`), with a training client feeding the trainer, every
rollout sees two versions; pinned, none does, and training resumes after.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import swarmrl
from swarmrl.envs import Environment, Item, Outcome, Rollout, Runner, RunnerConfig, Split
from swarmrl.envs._flow import best_by_val, evaluate_once, prune_checkpoints
from tests.envs_support import read_rollouts
from tests.helpers import REPO
from tests.server_fixtures import ServerFactory
from tests.store_support import trained_episode_ids

TRAIN = {"batch_rule": "groups", "group_size": "2", "batch_size": "1", "lr": "1e-3",
         "progress": "false", "checkpoint_every": "0", "checkpoint_on_stop": "false"}
LORA = {"lora_rank": "8", "lora_alpha": "16"}


class Feed(Environment):
    """Training rollouts that keep the trainer stepping (rewards vary within a group)."""

    def items(self, split: Split) -> list[Item]:
        return [Item(f"{split}{i}", {"i": i, "split": split}) for i in range(20)]

    async def play(self, rollout: Rollout) -> Outcome:
        await rollout.chat([{"role": "user", "content": "go"}], max_tokens=2)
        return Outcome(reward=float(rollout.episode.id[-1] in "02468ace"))


class WaitsForAStep(Feed):
    """Calls, waits (up to `wait_s`) for the served version to pass that call's, calls again."""

    def __init__(self, client: swarmrl.AsyncSwarmClient, wait_s: float) -> None:
        self.client, self.wait_s = client, wait_s

    def items(self, split: Split) -> list[Item]:
        return [Item(f"{split}{i}", {"i": i, "split": split}) for i in range(3)]

    async def play(self, rollout: Rollout) -> Outcome:
        first = await rollout.chat([{"role": "user", "content": "one"}], max_tokens=2)
        deadline, moved = time.monotonic() + self.wait_s, False
        while time.monotonic() < deadline and not moved:
            served = {m.name: m.policy_version for m in await self.client.list_models()}
            moved = served[rollout.model] > first.policy_version
            await asyncio.sleep(0.05)
        await rollout.chat([{"role": "user", "content": "two"}], max_tokens=2)
        return Outcome(reward=0.0, success=False, metrics={"moved": float(moved)})


@pytest.fixture(params=["hf", pytest.param("vllm", marks=[pytest.mark.slow, pytest.mark.vllm])])
async def training_server(request: pytest.FixtureRequest, make_server: ServerFactory) -> Any:
    """A training server on the tiny model: hf (full weights), or vLLM with LoRA."""
    from swarmrl_server.config import ModelSpec

    if request.param == "vllm":
        url = request.getfixturevalue("vllm_url")
        spec = ModelSpec("tiny", "tiny", engine="vllm", urls=(url,))
    else:
        spec = ModelSpec("tiny", "tiny")
    options = {**TRAIN, **(LORA if request.param == "vllm" else {})}
    return await make_server(models=(spec,), http=True, train=options)


async def test_a_pinned_evaluation_plays_one_version_while_training_goes_on(
        training_server: Any) -> None:
    target = training_server.grpc_target
    async with swarmrl.AsyncSwarmClient(target) as feeder, \
            swarmrl.AsyncSwarmClient(target) as evaluator:
        feed = Runner(Feed(), feeder, RunnerConfig(group_size=2, concurrency=2, progress=False))
        async with feed:
            training = asyncio.create_task(feed.train(seconds=600))
            try:
                # Unpinned: every rollout's second call comes after a step landed.
                race = WaitsForAStep(evaluator, wait_s=120)
                async with Runner(race, evaluator, RunnerConfig(progress=False)) as runner:
                    loose = await runner.evaluate("val", pin=False)
                assert all(r.metrics["moved"] == 1.0 for r in loose.records)
                assert len(loose.policy_versions) > 1
                # Pinned: the same rollouts wait in vain; one version; training resumes.
                calm = WaitsForAStep(evaluator, wait_s=3)
                async with Runner(calm, evaluator, RunnerConfig(progress=False)) as runner:
                    pinned = await runner.evaluate("val")
                    assert all(r.metrics["moved"] == 0.0 for r in pinned.records)
                    assert pinned.policy_versions == [pinned.pinned_version]
                    assert all(r.policy_versions == (pinned.pinned_version,)
                               for r in pinned.records)
                    deadline = time.monotonic() + 120
                    while await runner.policy_version() <= pinned.pinned_version:
                        assert time.monotonic() < deadline, "training did not resume"
                        await asyncio.sleep(0.1)
            finally:
                training.cancel()
                await asyncio.gather(training, return_exceptions=True)


async def test_a_hold_waits_out_a_step_longer_than_the_call_timeout(
        make_server: ServerFactory) -> None:
    """A pinned evaluation's hold waits for the step in progress: on a CPU a real model's
    step outlasts the unary deadline (a TextWorld run's first pinned evaluation after
    training failed with DEADLINE_EXCEEDED), so holds get `training_call_timeout`."""
    from swarmrl_server.trainer.trainer import Trainer

    running = await make_server(train=TRAIN)
    trainer = running.swarm.models["tiny"].trainer
    assert isinstance(trainer, Trainer)
    config = swarmrl.ClientConfig(target=running.grpc_target, call_timeout=0.3)
    async with swarmrl.AsyncSwarmClient(config=config) as client:
        async with trainer._lock:  # what a step holds while it runs: 5 call timeouts
            hold = asyncio.ensure_future(client.hold_training(holder="t", reason="eval"))
            await asyncio.sleep(1.5)
            assert not hold.done()
        state = await asyncio.wait_for(hold, 30)
        assert state.policy_version == 0 and trainer.holds == {"t": "eval"}
        await client.release_training(holder="t")
    assert trainer.holds == {}


async def test_evaluated_checkpoints_kept_are_the_best_by_val_and_the_latest(
        make_server: ServerFactory) -> None:
    """Three pinned evaluations, each checkpointed, with a step between each: after each,
    `prune_checkpoints` deletes those neither the best by val so far nor the latest."""
    running = await make_server(train=TRAIN)
    async with swarmrl.AsyncSwarmClient(running.grpc_target) as client:
        config = RunnerConfig(group_size=2, concurrency=2, progress=False)
        async with Runner(Feed(), client, config) as runner:
            evals: list[dict[str, Any]] = []
            for _ in range(3):
                version = await runner.policy_version()
                await runner.train(seconds=120, until_version=version + 1)
                evals.append(await evaluate_once(runner, None, "val", limit=4,
                                                 checkpoint=True))
                await prune_checkpoints(runner, evals)
                kept = [e for e in evals if not e.get("checkpoint_deleted")]
                assert kept == [e for e in evals if e is best_by_val(evals) or e is evals[-1]]
    assert len({e["checkpoint"] for e in evals}) == 3
    assert sum(bool(e.get("checkpoint_deleted")) for e in evals) >= 1
    assert all(Path(e["checkpoint"]).is_dir() != bool(e.get("checkpoint_deleted"))
               for e in evals)


def _swarmrl(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "swarmrl", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


@pytest.mark.slow
def test_a_train_run_tests_once_on_the_best_val_checkpoint(tmp_path: Path,
                                                           model_cache: Path) -> None:
    """`swarmrl train`: val on a pinned version with a checkpoint each time (those neither
    the best by val nor the latest deleted as the run goes), test played once, at the
    end, on the checkpoint val selected (served again when it is not the last version),
    never trained; the card records it all and repeats the run."""
    env_file = tmp_path / "feed_env.py"
    env_file.write_text(
        "from swarmrl.envs import Environment, Item, Outcome\n"
        "class Words(Environment):\n"
        "    def items(self, split):\n"
        "        off = {'train': 0, 'val': 100, 'test': 200}[split]\n"
        "        return [Item(str(i), {'q': f'word {i}'}) for i in range(off, off + 3)]\n"
        "    async def play(self, rollout):\n"
        "        c = await rollout.chat([{'role': 'user', 'content': rollout.item.data['q']}])\n"
        "        return Outcome(reward=float(len(c.completion_ids) % 2), success=False)\n")
    out = tmp_path / "run"
    argv = ["train", f"{env_file}:Words", "--groups", "3", "--group-size", "2",
            "--max-tokens", "3", "--eval-every", "1", "--out", str(out), "--no-progress",
            *[f"--train-option={k}={v}" for k, v in TRAIN.items()],
            "--server-arg=--cache-dir", f"--server-arg={model_cache}"]
    _swarmrl(*argv)
    card = json.loads((out / "card.json").read_text())
    vals = [e for e in card["evals"] if e["split"] == "val"]
    assert vals[0]["name"] == "before" and vals[-1]["name"] == "after"
    assert all(e["checkpoint"] and e["pinned_version"] >= 0 for e in vals)
    assert all(e["figures"]["policy_versions"] == [e["pinned_version"]] for e in vals)
    clock = [e["train_seconds"] for e in vals]  # training time, evaluations left out
    assert clock[0] == 0.0 and clock == sorted(clock) and clock[-1] > 0.0
    assert clock[-1] == round(card["train"]["seconds"], 1)
    # Every val figure ties (success is never reached): the earliest version wins, which
    # is not the last one, so it is served again as a new version and tested there.
    selected = card["selected"]
    assert selected["name"] == "before" and selected["pinned_version"] == vals[0]["pinned_version"]
    assert selected["restored_as_version"] > vals[-1]["pinned_version"]
    # Checkpoints kept: the best by val and the latest; any other was deleted.
    assert {e["name"] for e in vals if not e.get("checkpoint_deleted")} == {"before", "after"}
    assert all(Path(e["checkpoint"]).is_dir() != bool(e.get("checkpoint_deleted"))
               for e in vals)
    test = card["test"]
    assert test["pinned_version"] == selected["restored_as_version"]
    assert test["figures"]["n"] == 3 and card["splits"]["test"]["items"] == 3
    rows = read_rollouts(out)
    tests = [r for r in rows if r["split"] == "test"]
    assert len(tests) == 3 and {r["item_id"] for r in tests} == {"200", "201", "202"}
    assert not any(r["trained"] for r in tests)
    assert not {r["episode_id"] for r in tests} & trained_episode_ids(out / "data")
    assert all(r["split"] in ("train", "val", "test") for r in rows)
    assert card["server"]["train_options"]["tiny"]["group_size"] == 2  # every option, given or not
    assert "lr" in card["server"]["train_options"]["tiny"] and card["packages"]["torch"]
    assert (out / "card.md").read_text().startswith("# Run card: train")
    # The card repeats its run: the same arguments, a new folder, and every option the
    # card recorded pinned, so a default changed since changes nothing. The card is made
    # to record weight_sync=wait, as if "auto" had meant wait when it ran (hf's is interrupt).
    assert card["server"]["train_options"]["tiny"]["weight_sync"] == "interrupt"
    card["server"]["train_options"]["tiny"]["weight_sync"] = "wait"
    (out / "card.json").write_text(json.dumps(card))
    again = tmp_path / "again"
    _swarmrl("train", "--from-card", str(out / "card.json"), "--out", str(again))
    repeat = json.loads((again / "card.json").read_text())
    strip = [a for a in card["argv"] if a not in ("--out", str(out))]
    repeated = [a for a in repeat["argv"] if a not in ("--out", str(again))]
    assert repeated[:len(strip)] == strip and "weight_sync=wait" in repeated[len(strip):]
    assert repeat["server"]["train_options"] == card["server"]["train_options"]
    assert repeat["splits"] == card["splits"]
