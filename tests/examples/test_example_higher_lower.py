"""The higher-or-lower game (examples/higher_lower), the suite's multi-turn environment:
its rules, its splits, and a real run of `swarmrl train` on it against the tiny model.

The splits are what the defaults study (results/studies/defaults-plan.md) relies on:
val and test from their own recorded seeds, disjoint by content, the same games in every
process; a training game equal to a held-out one is never played.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from examples.higher_lower.env import HigherLower, parse_guess
from swarmrl.envs import Rollout, Runner
from tests.envs_support import read_rollouts, train_attached
from tests.helpers import REPO
from tests.store_support import stored_episodes, trained_episode_ids

DIGESTS = ("import hashlib; from examples.higher_lower.env import HigherLower; "
           "e = HigherLower(); print(*(hashlib.sha256(''.join(i.digest for i in "
           "e.items(s)).encode()).hexdigest() for s in ('val', 'test')))")


def _digest(items: list[Any]) -> str:
    return hashlib.sha256("".join(i.digest for i in items).encode()).hexdigest()


def test_splits_are_disjoint_by_content_and_the_same_in_every_process() -> None:
    env = HigherLower()
    val, test = list(env.items("val")), list(env.items("test"))
    assert (len(val), len(test)) == (40, 80)
    held_out = {i.content for i in [*val, *test]}
    assert len(held_out) == 120  # no game twice, none in both
    for item in [*val, *test]:
        game = item.data
        assert game["high"] - game["low"] == 15 and game["low"] <= game["secret"] <= game["high"]
        assert item.content == f"{game['low']}-{game['high']}:{game['secret']}"
    # The train stream meets held-out games (about 1,300 games in all); the runner skips them.
    runner = Runner(env, None)  # type: ignore[arg-type]  # splits only: no server needed
    drawn = [i.content for i in itertools.islice(runner.train_items(), 600)]
    assert not held_out & set(drawn) and runner.skipped_held_out > 0
    # Held-out splits do not depend on the training seed; the train stream does.
    other = HigherLower(seed=1)
    assert [i.content for i in other.items("val")] == [i.content for i in val]
    assert [i.content for i in itertools.islice(other.items("train"), 20)] != \
        [i.content for i in itertools.islice(env.items("train"), 20)]
    # Another process, another hash seed: the same games, in the same order.
    done = subprocess.run([sys.executable, "-c", DIGESTS], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=True,
                          env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert done.stdout.split() == [_digest(val), _digest(test)]


class _Scripted:
    """A rollout whose model replies with `policy(messages)`: enough for `play`'s rules."""

    def __init__(self, item: Any, policy: Any) -> None:
        self.item, self.policy, self.calls = item, policy, 0
        self.sampling = SimpleNamespace(max_tokens=None)

    async def chat(self, messages: list[Any], **options: Any) -> Any:
        self.calls += 1
        text = self.policy(messages)
        return SimpleNamespace(text=text, message={"role": "assistant", "content": text})


def _play(env: HigherLower, item: Any, policy: Any) -> tuple[Any, int]:
    rollout = _Scripted(item, policy)
    return asyncio.run(env.play(cast(Rollout, rollout))), rollout.calls


def _halving(messages: list[Any]) -> str:
    """Guesses the middle of the range the last message states ("... from A to B.")."""
    low, high = map(int, re.findall(r"from (\d+) to (\d+)", messages[-1]["content"])[-1])
    return f"My guess: {(low + high) // 2}"


def test_the_game_answers_higher_or_lower_and_rewards_the_find() -> None:
    env = HigherLower(size=16, turns=5)
    for item in env.items("val")[:10]:  # type: ignore[index]
        game = item.data
        outcome, calls = _play(env, item, _halving)  # halving 16 needs 5 guesses at most
        assert outcome.success and outcome.reward == 1.0 and calls <= 5
        assert outcome.info["guesses"][-1] == game["secret"]
        assert outcome.metrics["consistent"] == 1.0
    item = next(i for i in env.items("val") if i.data["secret"] != i.data["low"])
    stubborn, calls = _play(env, item, lambda messages: str(item.data["low"]))
    # The same guess five times: the first ruled out one number of 16, the rest nothing.
    assert not stubborn.success and calls == 5
    assert stubborn.reward == pytest.approx(0.25 * 1 / 16)
    assert stubborn.metrics["consistent"] == pytest.approx(1 / 5)
    lost, calls = _play(env, item, lambda messages: "I do not know")
    assert (lost.reward, lost.success, calls, lost.metrics["parsed"]) == (0.0, False, 5, 0.0)
    assert parse_guess("between 3 and 7, so 5.") == 5 and parse_guess("none") is None
    with pytest.raises(ValueError, match="size"):
        HigherLower(size=1)


@pytest.mark.slow
def test_swarmrl_train_plays_multi_turn_games_and_the_card_records_them(
        tmp_path: Path, model_cache: Path) -> None:
    out = tmp_path / "run"
    train_attached(out, model_cache, [
        "examples.higher_lower.env:HigherLower", "--env-arg", "val_size=2", "--env-arg",
        "test_size=2", "--env-arg", "turns=3", "--groups", "2", "--group-size", "2"],
        train_options={"batch_size": "2", "batch_rule": "groups"})
    rows = read_rollouts(out)
    train = [r for r in rows if r["split"] == "train"]
    assert len(train) == 4 and all(r["trained"] for r in train)
    assert len([r for r in rows if r["split"] == "val"]) == 4  # before and after
    assert len([r for r in rows if r["split"] == "test"]) == 2  # once
    episodes = stored_episodes(out / "data")
    for r in train:
        calls = sorted(episodes[r["episode_id"]].calls, key=lambda c: c.seq)
        assert len(calls) == len(r["info"]["guesses"])  # one call per guess
        for before, after in itertools.pairwise(calls):  # each turn extends the last, exactly
            done = before.prompt_ids + before.completion_ids
            assert after.prompt_ids[:len(done)] == done
    assert any(len(episodes[r["episode_id"]].calls) > 1 for r in train)  # multi-turn
    assert trained_episode_ids(out / "data") == {r["episode_id"] for r in train}
    card = json.loads((out / "card.json").read_text())
    assert card["env"]["describe"]["turns"] == 3
    assert card["env"]["describe"]["seeds"] == {"test": 50_261_207, "val": 50_261_208,
                                                "train": 60_261_207}
    assert (card["train"]["groups"], card["train"]["rollouts"]) == (2, 4)
    assert "4 rollouts" in (out / "card.md").read_text()
