"""What the environment tests share: what a run's tests read back (its episodes through
the SDK, its rollout records; its store: tests/store_support.py), and `Scripted`, an
environment whose rollouts a test scripts."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import swarmrl
from swarmrl.envs import Environment, Item, Outcome, Rollout, Split
from tests.helpers import REPO, ServerProcess


def episode_states(target: str, episode_ids: list[str]) -> dict[str, tuple[str, float | None, int]]:
    """Each episode's state, reward and number of calls, through the SDK."""

    async def fetch() -> dict[str, tuple[str, float | None, int]]:
        async with swarmrl.AsyncSwarmClient(target) as client:
            infos = [await client.get_episode(i) for i in episode_ids]
        return {i.episode_id: (i.state, i.reward, i.num_calls) for i in infos}

    return asyncio.run(fetch())


def read_rollouts(out: Path) -> list[dict]:
    """The rollout records a `swarmrl train` / `swarmrl eval` run wrote (``rollouts.jsonl``)."""
    import json

    return [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]


def train_attached(out: Path, model_cache: Path, args: list[str], *,
                   train_options: dict[str, str]) -> Path:
    """Runs ``swarmrl train ARGS --target --out OUT`` against a training server forked for
    it (`ServerProcess`, its data dir ``OUT/data`` as a launched one's), stops the server
    and returns its log. The command runs as a user runs it; only the server is not one it
    launched, which saves the ~10 s of imports `swarmrl serve` pays before it reads its
    flags (the launch is tested in tests/sdk/envs/test_envs_runner.py and test_envs_eval.py).
    The server gets the train options `swarmrl train` gives a server it launches
    (`_train_options`: ``--group-size`` as its group size, every checkpoint kept) with
    `train_options`."""
    from swarmrl.envs._cli import _parser, _train_options

    given = [f"--train-option={key}={value}" for key, value in train_options.items()]
    options = _train_options(_parser("train").parse_args([*args, *given]))
    flags = [x for key, value in options.items() for x in ("--train-option", f"{key}={value}")]
    server = ServerProcess(data_dir=out / "data", cache_dir=model_cache, http_port=0,
                           extra=["--model", "tiny", "--train", *flags]).start()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "swarmrl", "train", *args, "--target", server.target,
             "--out", str(out), "--no-progress"],
            cwd=REPO, capture_output=True, text=True, timeout=600)
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    return server.log_path


class Scripted(Environment):
    """Items t0..tN-1 (train), v0..v3 (val), e0..e1 (test); `act(rollout)` decides each
    rollout after its first model call (return an Outcome, raise, or wait)."""

    name = "scripted"

    def __init__(self, act: Any = None, *, n_train: int = 4) -> None:
        self.act = act
        self.n_train = n_train
        self.episodes: list[str] = []

    def items(self, split: Split) -> list[Item]:
        n, prefix = {"train": (self.n_train, "t"), "val": (4, "v"), "test": (2, "e")}[split]
        return [Item(f"{prefix}{i}", {"split": split, "i": i}) for i in range(n)]

    async def play(self, rollout: Rollout) -> Outcome:
        self.episodes.append(rollout.episode.id)
        c = await rollout.chat([{"role": "user", "content": "hi"}], max_tokens=2)
        if self.act is not None:
            result = await self.act(rollout)
            if result is not None:
                return result  # type: ignore[no-any-return]
        return Outcome(reward=float(len(c.completion_ids)), success=True)
