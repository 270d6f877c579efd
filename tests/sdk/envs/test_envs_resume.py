"""A run folder survives its writer being killed: the card is replaced whole or not at all
(`_card.write_atomic`), so a resumed run always reads a card; a `swarmrl train` killed
in training and in test resumes from its folder exactly (`_runfolder`)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import swarmrl
from swarmrl.envs import _card, _runfolder
from swarmrl.envs._flow import merge_totals
from tests.envs_support import read_rollouts
from tests.helpers import REPO, ServerProcess, wait_until

# The writer writes card "old", then card "new" with io.open patched so that the write of
# the JSON stops halfway: half the text is flushed to the file, "mid-write" is printed,
# and the writer waits to be killed.
_WRITER = """
import io, json, sys, time
from pathlib import Path
from swarmrl.envs import _card, _runfolder
from swarmrl.envs._flow import merge_totals

out = Path(sys.argv[1])
def card(tag):
    return {"kind": "train", "created": "t", "argv": [], "server": {}, "packages": {},
            "env": {"label": "e", "spec": "m:E", "args": {}}, "tag": tag,
            "evals": [{"name": f"v{i}", "split": "val", "pad": "x" * 1000} for i in range(2000)]}

_card.write(out, card("old"))
real_open = io.open

class Stalls:
    def __init__(self, f):
        self._f = f
    def write(self, text):
        if not text.startswith("{"):
            return self._f.write(text)
        self._f.write(text[: len(text) // 2])
        self._f.flush()
        print("mid-write", flush=True)
        time.sleep(600)
    def __getattr__(self, name):
        return getattr(self._f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

def stalling_open(file, mode="r", *args, **kwargs):
    f = real_open(file, mode, *args, **kwargs)
    return Stalls(f) if "w" in mode else f

io.open = stalling_open
_card.write(out, card("new"))
"""


@pytest.mark.slow
def test_a_card_killed_mid_write_reads_back_whole(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # EOF (an empty line) if the writer died first
        assert line.strip() == "mid-write", "the writer did not reach its second write"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    # Half of the new JSON went to disk, but not into card.json: it reads back whole.
    assert json.loads((tmp_path / "card.json").read_text())["tag"] == "old"
    assert list(tmp_path.glob(".card.json.*.tmp"))  # the killed writer's half file
    card = _card.read(tmp_path)
    assert card is not None and card["tag"] == "old" and len(card["evals"]) == 2000
    assert not list(tmp_path.glob(".card.*.tmp"))  # read() clears what a killed writer left
    assert (tmp_path / "card.md").read_text().startswith("# Run card: train")


# Stalls (sleeps) once in training, after a group was trained, and once in test: the
# points where the test kills `swarmrl train`. Each stall leaves a marker next to the run
# folder; a stall already marked is not repeated, so a resumed run plays on.
_STALLING_ENV = """
import asyncio, json
from pathlib import Path
from swarmrl.envs import Environment, Item, Outcome

class Stalls(Environment):
    def __init__(self, out):
        self.out = Path(out)

    def items(self, split):
        off, n = {"train": (0, 6), "val": (100, 2), "test": (200, 2)}[split]
        return [Item(str(i), {"q": f"word {i}"}) for i in range(off, off + n)]

    def _trained_a_group(self):
        rows = self.out / "rollouts.jsonl"
        return rows.exists() and any(json.loads(r).get("trained")
                                     for r in rows.read_text().splitlines() if r)

    async def play(self, rollout):
        c = await rollout.chat([{"role": "user", "content": rollout.item.data["q"]}])
        marker = self.out.parent / f"stall-{rollout.split}"
        if (rollout.split == "test" or (rollout.split == "train" and self._trained_a_group())) \\
                and not marker.exists():
            marker.write_text(rollout.item.id)
            await asyncio.sleep(600)
        return Outcome(reward=float(len(c.completion_ids) % 2), success=False)
"""

TRAIN = {"batch_rule": "groups", "group_size": "2", "batch_size": "1", "lr": "1e-3",
         "progress": "false", "checkpoint_every": "0", "checkpoint_on_stop": "false"}


def _status(target: str) -> Any:
    async def get() -> Any:
        async with swarmrl.AsyncSwarmClient(target) as client:
            return await client.status()
    return asyncio.run(get())


def _trained_groups(out: Path) -> set[str]:
    return {r["group_id"] for r in read_rollouts(out) if r["split"] == "train" and r["trained"]}


@pytest.mark.slow
def test_a_run_killed_in_training_and_in_test_resumes_exactly(tmp_path: Path,
                                                             model_cache: Path) -> None:
    """`swarmrl train` SIGKILLed mid-training, then, resumed, SIGKILLed during its test
    evaluation (holding training), then resumed again: the last start lifts the hold the
    dead one left (its session still lives: --lease 600), does not play test again, and
    the card's training totals count every group the server trained across the starts."""
    env_file, out = tmp_path / "stalls.py", tmp_path / "run"
    env_file.write_text(_STALLING_ENV)
    flags = [x for k, v in TRAIN.items() for x in ("--train-option", f"{k}={v}")]
    server = ServerProcess(data_dir=tmp_path / "data", cache_dir=model_cache, http_port=0,
                           extra=["--model", "tiny", "--train", *flags]).start()
    argv = [sys.executable, "-m", "swarmrl", "train", f"{env_file}:Stalls",
            "--env-arg", f"out={out}", "--target", server.target, "--out", str(out),
            "--groups", "3", "--group-size", "2", "--concurrency", "2", "--max-tokens", "3",
            "--lease", "600", "--no-progress"]

    def killed_at(marker: str) -> None:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: (tmp_path / marker).exists() or proc.poll() is not None,
                       timeout=300, what=marker)
            assert proc.poll() is None, proc.communicate()[1][-3000:]
        finally:
            proc.kill()
            proc.wait(timeout=30)

    try:
        killed_at("stall-train")
        first = _card.read(out)
        assert first is not None and "train" not in first  # the kill cut the first stretch
        trained_before = _trained_groups(out)
        assert trained_before

        killed_at("stall-test")
        holder = _card.read(out)["holder"]  # type: ignore[index]
        holds = _status(server.target).holds
        assert [h.holder for h in holds] == [holder]  # the dead start's, on its live session
        tests_before = [r for r in read_rollouts(out) if r["split"] == "test"]

        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        status = _status(server.target)
        assert status.holds == []  # lifted by the resumed run, not left to the lease
    finally:
        server.stop()
    card = _card.read(out)
    assert card is not None and card["finished"] and len(card["starts"]) == 3
    assert card["holder"] == holder
    assert card["test"]["interrupted"] and "figures" not in card["test"]
    assert [r for r in read_rollouts(out) if r["split"] == "test"] == tests_before
    # The partial test's rows are named by the card (none of a recorded evaluation is).
    cut = {c["split"]: c["rows"] for c in card.get("cut_evaluations", [])}
    assert cut.get("test", 0) == len(tests_before) and "val" not in cut
    trained = _trained_groups(out)
    assert trained > trained_before  # the second start trained the rest
    assert card["train"]["groups"] == len(trained)
    assert card["train"]["groups"] + card["train"]["groups_aborted"] >= 3
    assert card["starts"][1]["found_cut_stretch"]["groups"] == len(trained_before)
    after = next(e for e in card["evals"] if e["name"] == "after")  # on the run's clock
    assert after["train_seconds"] == pytest.approx(card["train"]["seconds"], abs=0.11)
    assert "interrupted" in (out / "card.md").read_text()


def test_training_totals_add_up_across_starts() -> None:
    """Counts and seconds add, counts by kind add by kind, the mean reward is weighted by
    the rewards it is over."""
    first = {"groups": 3, "groups_aborted": 1, "rollouts": 8, "seconds": 10.0,
             "errors": {"timeout": 2}, "failed": 2, "rewarded": 6, "mean_reward": 0.5,
             "skipped_held_out": 1}
    second = {"groups": 1, "groups_aborted": 0, "rollouts": 2, "seconds": 2.5,
              "errors": {"timeout": 1, "environment": 3}, "failed": 4, "rewarded": 2,
              "mean_reward": 1.0, "skipped_held_out": 1}
    total = merge_totals(first, second)
    assert total == {"groups": 4, "groups_aborted": 1, "rollouts": 10, "seconds": 12.5,
                     "errors": {"timeout": 3, "environment": 3}, "failed": 6, "rewarded": 8,
                     "mean_reward": 0.625, "skipped_held_out": 2}
    assert merge_totals(None, second) == second


def test_the_card_shows_failures_per_split_and_kind_a_stop_and_an_interrupted_test() -> None:
    card = _card.base("train", ["m:E"], "m:E", "e", {}, {})
    card.update(server={}, packages={}, stopped={"error": "TypeError: boom", "item": "7",
                                                 "split": "train"})
    figures = {"n": 4, "failed": 2, "errors": {"timeout": 1, "environment": 1},
               "solved": 1, "success_rate": 0.25, "success_ci95": [0.05, 0.7]}
    card["evals"] = [{"name": "before", "split": "val", "pinned_version": 0,
                      "figures": figures, "checkpoint": "/c/step-0",
                      "checkpoint_deleted": True}]
    card["train"] = {"groups": 2, "groups_aborted": 1, "rollouts": 6, "seconds": 60.0,
                     "errors": {"policy": 3}, "failed": 0, "mean_reward": 0.5}
    card["test"] = {"name": "test", "split": "test", "pinned_version": 3, "interrupted": True}
    text = _card.render_markdown(card)
    assert "| before | val | 0 |  | 0.250 (1/4, 95% CI 0.050-0.700) | 2 failed; " \
           "environment 1, timeout 1 | (deleted) /c/step-0 |" in text
    assert "Training: 2 groups trained, 1 aborted, 6 rollouts, mean reward 0.500, 1.0 min, " \
           "errors: policy 3." in text
    assert "**Stopped** on item `7` of train: `TypeError: boom`" in text
    assert "**interrupted** and not played again" in text


@pytest.mark.slow
def test_a_run_with_its_own_server_killed_in_training_resumes_on_its_data_dir(
        tmp_path: Path, model_cache: Path) -> None:
    """`swarmrl train` with the server it started, SIGKILLed mid-training: its server goes
    with it (no orphan left on the data dir), and the run started again starts a server on
    the same data dir, which resumes from the latest checkpoint (val before's), and
    finishes with the totals of both starts."""
    env_file, out = tmp_path / "stalls.py", tmp_path / "run"
    env_file.write_text(_STALLING_ENV)
    argv = [sys.executable, "-m", "swarmrl", "train", f"{env_file}:Stalls",
            "--env-arg", f"out={out}", "--out", str(out), "--groups", "3",
            "--group-size", "2", "--concurrency", "2", "--max-tokens", "3", "--no-progress",
            "--no-test", *[f"--train-option={k}={v}" for k, v in TRAIN.items()],
            "--server-arg=--cache-dir", f"--server-arg={model_cache}"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: (tmp_path / "stall-train").exists() or proc.poll() is not None,
                   timeout=300, what="the training stall")
        assert proc.poll() is None, proc.communicate()[1][-3000:]
    finally:
        proc.kill()
        proc.wait(timeout=30)
    first = _card.read(out)
    assert first is not None
    pid = first["server"]["pid"]
    trained_before = _trained_groups(out)
    assert trained_before
    # Started again at once: the killed run's server may still be shutting down; the new
    # start waits for it to be gone before it starts one on the same data dir.
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not Path(f"/proc/{pid}").exists() or b"zombie" in Path(
        f"/proc/{pid}/status").read_bytes().lower()  # it went with its run
    log = (out / "server.log").read_text()
    assert log.index(f"Finished server process [{pid}]") < log.index("trainer_resumed")
    card = _card.read(out)
    assert card is not None and card["finished"] and len(card["starts"]) == 2
    assert "trainer_resumed" in (out / "server.log").read_text()
    trained = _trained_groups(out)
    assert trained > trained_before and card["train"]["groups"] == len(trained)
    assert [e["name"] for e in card["evals"]] == ["before", "after"]


def test_a_resumed_card_keeps_the_run_and_each_start(tmp_path: Path) -> None:
    previous = _card.base("train", ["m:E", "--groups", "3"], "m:E", "e", {}, {})
    _runfolder.carry_over(None, previous, tmp_path, ["m:E", "--groups", "3"])
    previous.update(evals=[{"name": "before", "split": "val"}], stopped={"error": "E"},
                    train={"groups": 1, "groups_aborted": 0}, train_saved=1e12)
    card = _card.base("train", ["m:E", "--groups", "5"], "m:E", "e", {}, {})
    _runfolder.carry_over(previous, card, tmp_path, ["m:E", "--groups", "5"])
    assert card["argv"] == ["m:E", "--groups", "3"]  # the run's command, for --from-card
    assert card["holder"] == _runfolder.holder(tmp_path) == previous["holder"]
    assert [s["argv"][-1] for s in card["starts"]] == ["3", "5"]
    assert card["starts"][0]["stopped"] == {"error": "E"} and "stopped" not in card
    assert card["evals"] == previous["evals"]
    assert _runfolder.budget(card, None, 5).groups == 4
