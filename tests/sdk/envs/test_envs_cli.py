"""`swarmrl train` / `swarmrl eval` as a user runs them: options checked before anything
runs (the session lease, an attached server's group size, empty splits), a run stopped at
an environment's bug, a kept checkpoint evaluated again."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import swarmrl
from swarmrl.envs import _card
from swarmrl.envs._cli import DEFAULT_LEASE_S, _parser
from tests.helpers import REPO, ServerProcess


@pytest.mark.parametrize("command", ["train", "eval"])
def test_the_session_lease_is_an_option_within_the_servers_range(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    budget = ["--groups", "1"] if command == "train" else []
    args = _parser(command).parse_args(["m:E", *budget])
    assert args.lease == DEFAULT_LEASE_S == 60.0
    assert _parser(command).parse_args(["m:E", *budget, "--lease", "5"]).lease == 5.0
    for bad in ("0", "601", "soon"):
        with pytest.raises(SystemExit):
            _parser(command).parse_args(["m:E", *budget, "--lease", bad])
        assert "--lease" in capsys.readouterr().err


# An environment for the CLI's refusals and stops: what `play` does is chosen per split
# by --env-arg (ok, or raise TypeError), items may be made to stall past the rollout
# timeout, and a split may be given no items.
_ENV = """
import asyncio
from swarmrl.envs import Environment, Item, Outcome

class Env(Environment):
    def __init__(self, raises=(), empty=(), slow=()):
        self.raises, self.empty, self.slow = raises, empty, slow

    def items(self, split):
        off = {"train": 0, "val": 100, "test": 200}[split]
        return [] if split in self.empty else [Item(str(i), {"q": f"w {i}"})
                                                for i in range(off, off + 2)]

    async def play(self, rollout):
        if rollout.split in self.raises:
            return rollout.item.data["q"] + 1  # a bug in the environment: TypeError
        c = await rollout.chat([{"role": "user", "content": rollout.item.data["q"]}])
        if rollout.item.id in self.slow:
            await asyncio.sleep(600)  # past any --rollout-timeout the test gives
        return Outcome(reward=float(len(c.completion_ids) % 2), success=False)
"""

TRAIN = {"batch_rule": "groups", "group_size": "2", "batch_size": "1", "lr": "1e-3",
         "progress": "false", "checkpoint_every": "0", "checkpoint_on_stop": "false"}


@pytest.fixture
def env_file(tmp_path: Path) -> Path:
    path = tmp_path / "cli_env.py"
    path.write_text(_ENV)
    return path


@pytest.fixture
def attached(tmp_path: Path, model_cache: Path) -> Iterator[ServerProcess]:
    """A training server (group_size 2) for `swarmrl train --target`."""
    flags = [x for k, v in TRAIN.items() for x in ("--train-option", f"{k}={v}")]
    server = ServerProcess(data_dir=tmp_path / "data", cache_dir=model_cache, http_port=0,
                           extra=["--model", "tiny", "--train", *flags]).start()
    try:
        yield server
    finally:
        server.stop()


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "swarmrl", *args, "--no-progress"], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_refusals_come_before_anything_is_played(env_file: Path, tmp_path: Path,
                                                 attached: ServerProcess) -> None:
    """An attached run whose --group-size is not the server's, and a run whose val (or
    test) split is empty, are refused with what to do, and play no rollout."""
    common = ["--target", attached.target, "--groups", "1"]
    out = tmp_path / "sizes"
    done = _cli("train", f"{env_file}:Env", *common, "--group-size", "4", "--out", str(out))
    assert done.returncode == 2, done.stderr[-2000:]
    assert "--group-size 4 differs from the group_size 2 of 'tiny'" in done.stderr
    assert "pass --group-size 2" in done.stderr
    assert not (out / "rollouts.jsonl").read_text()
    assert "group_size 2" in _card.read(out)["refused"]  # type: ignore[index]
    for split, fix in (("val", "--no-val"), ("test", "--no-test")):
        out = tmp_path / f"empty-{split}"
        done = _cli("train", f"{env_file}:Env", "--env-arg", f'empty=["{split}"]', *common,
                    "--group-size", "2", "--out", str(out))
        assert done.returncode == 2, done.stderr[-2000:]
        assert f"the {split} split has no items" in done.stderr and fix in done.stderr
        assert not (out / "rollouts.jsonl").read_text()
    out = tmp_path / "eval-empty"
    done = _cli("eval", f"{env_file}:Env", "--env-arg", 'empty=["test"]', "--split", "test",
                "--target", attached.target, "--out", str(out))
    assert done.returncode == 2 and "the test split has no items" in done.stderr
    done = _cli("eval", f"{env_file}:Env", "--checkpoint", "12", "--out", str(tmp_path / "step"))
    assert done.returncode == 2 and "a step names a checkpoint of the --target" in done.stderr
    done = _cli("eval", f"{env_file}:Env", "--checkpoint", "12", "--target", attached.target,
                "--out", str(tmp_path / "no-step"))  # the server has no step 12
    assert done.returncode == 2 and "--checkpoint 12: " in done.stderr


@pytest.mark.slow
def test_an_environment_bug_stops_the_run_within_seconds(env_file: Path,
                                                         tmp_path: Path) -> None:
    """`play()` raising TypeError on every train item: `swarmrl train` (its own server, a
    budget of 10 minutes) stops at the first one, naming the error and the item, records
    it in the card, and stops its server."""
    out = tmp_path / "run"
    t0 = time.monotonic()
    done = _cli("train", f"{env_file}:Env", "--env-arg", 'raises=["train"]', "--minutes", "10",
                "--group-size", "2", "--max-tokens", "2", "--out", str(out),
                *[f"--train-option={k}={v}" for k, v in TRAIN.items()])
    elapsed = time.monotonic() - t0
    assert done.returncode == 1, done.stderr[-3000:]
    assert elapsed < 120  # the server's start included; the budget was 600 s
    card = _card.read(out)
    assert card is not None
    stopped = card["stopped"]
    assert stopped["split"] == "train" and stopped["item"] in ("0", "1")
    assert stopped["error"].startswith("TypeError")
    assert f"item {stopped['item']!r} of train" in done.stderr and "TypeError" in done.stderr
    assert "**Stopped**" in (out / "card.md").read_text()
    assert "shutting_down" in (out / "server.log").read_text()  # its server was stopped


@pytest.mark.slow
def test_eval_plays_a_kept_checkpoint_served_again(env_file: Path, tmp_path: Path,
                                                   attached: ServerProcess,
                                                   model_cache: Path) -> None:
    """`swarmrl eval --checkpoint PATH` on an attached server: the checkpoint is restored
    as a new policy version and the evaluation pinned to it; the card names both. A
    started server (`--resume PATH`) serves it from its start."""
    async def save() -> str:
        async with swarmrl.AsyncSwarmClient(attached.target) as client:
            return (await client.save_checkpoint())[0]

    path = asyncio.run(save())
    out = tmp_path / "eval"
    done = _cli("eval", f"{env_file}:Env", "--target", attached.target, "--checkpoint", path,
                "--max-tokens", "2", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    card = _card.read(out)
    assert card is not None and card["checkpoint"]["path"] == path
    version = card["checkpoint"]["restored_as_version"]
    assert version > 0 and card["evals"][0]["pinned_version"] == version
    assert card["evals"][0]["figures"]["policy_versions"] == [version]
    assert f"checkpoint evaluated: {path}" in (out / "card.md").read_text()
    # By its step, as a client that cannot see the server's data dir names it.
    step = Path(path).name.removeprefix("step-")
    done = _cli("eval", f"{env_file}:Env", "--target", attached.target, "--checkpoint", step,
                "--max-tokens", "2", "--out", str(tmp_path / "eval-step"))
    assert done.returncode == 0, done.stderr[-3000:]
    card = _card.read(tmp_path / "eval-step")
    assert card is not None and card["checkpoint"]["restored_as_version"] > version
    # A folder that holds a run is not reused by eval.
    again = _cli("eval", f"{env_file}:Env", "--target", attached.target, "--out", str(out))
    assert again.returncode == 2 and "pick a new --out" in again.stderr
    # Without --target, the started server serves the checkpoint from its start.
    out = tmp_path / "eval-started"
    done = _cli("eval", f"{env_file}:Env", "--checkpoint", path, "--max-tokens", "2",
                "--out", str(out), "--server-arg=--cache-dir", f"--server-arg={model_cache}")
    assert done.returncode == 0, done.stderr[-3000:]
    card = _card.read(out)
    assert card is not None and card["checkpoint"]["path"] == path
    assert "trainer_resumed" in (out / "server.log").read_text()
    version = card["checkpoint"]["served_from_start_as_version"]
    assert card["evals"][0]["figures"]["policy_versions"] == [version]


@pytest.mark.slow
def test_timeouts_count_in_the_denominator_and_show_on_the_card(
        env_file: Path, tmp_path: Path, attached: ServerProcess) -> None:
    """One of two val items stalls past --rollout-timeout: the evaluation's n counts both,
    its success rate is over both, and the card (JSON and Markdown) shows the timeout."""
    out = tmp_path / "eval"
    done = _cli("eval", f"{env_file}:Env", "--env-arg", 'slow=["101"]', "--target",
                attached.target, "--rollout-timeout", "2", "--max-tokens", "2",
                "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    card = _card.read(out)
    assert card is not None
    figures = card["evals"][0]["figures"]
    assert figures["n"] == 2 and figures["errors"] == {"timeout": 1}
    assert figures["solved"] == 0 and figures["success_rate"] == 0.0
    assert "| 1 failed; timeout 1 |" in (out / "card.md").read_text()


@pytest.mark.slow
def test_eval_serves_a_lora_checkpoint_with_its_rank(env_file: Path, tmp_path: Path,
                                                     model_cache: Path) -> None:
    """A LoRA checkpoint is an adapter: the server `swarmrl eval --checkpoint` starts gets
    the checkpoint's lora_rank and lora_alpha, so it loads."""
    lora = {**TRAIN, "lora_rank": "4", "lora_alpha": "8"}
    flags = [x for k, v in lora.items() for x in ("--train-option", f"{k}={v}")]
    server = ServerProcess(data_dir=tmp_path / "data", cache_dir=model_cache, http_port=0,
                           extra=["--model", "tiny", "--train", *flags]).start()

    async def save() -> str:
        async with swarmrl.AsyncSwarmClient(server.target) as client:
            return (await client.save_checkpoint())[0]

    try:
        path = asyncio.run(save())
    finally:
        server.stop()
    out = tmp_path / "eval"
    done = _cli("eval", f"{env_file}:Env", "--checkpoint", path, "--max-tokens", "2",
                "--out", str(out), "--server-arg=--cache-dir", f"--server-arg={model_cache}")
    assert done.returncode == 0, done.stderr[-3000:]
    card = _card.read(out)
    assert card is not None and card["server"]["train_options_given"] == {
        "lora_rank": "4", "lora_alpha": "8"}
    assert "trainer_resumed" in (out / "server.log").read_text()
