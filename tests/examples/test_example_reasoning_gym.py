"""The reasoning-gym recipe: its answer extraction and splits, and a short real run.

The run is `swarmrl train examples.reasoning_gym.env:ReasoningGym` against the tiny model:
val episodes are aborted and never trained, training episodes end with the dataset
scorer's reward, and a trainer step takes each task's quota of groups.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from examples.reasoning_gym.env import ReasoningGym, extract_answer
from swarmrl.envs import Runner
from tests.envs_support import episode_states, read_rollouts, train_attached
from tests.helpers import REPO
from tests.store_support import trained_episode_ids


def test_the_last_number_of_a_reply_is_scored_by_the_dataset() -> None:
    assert extract_answer("5 - 3 = 2") == "2"
    assert extract_answer("The answer is -14.") == "-14"
    assert extract_answer("no idea") == "no idea"
    env = ReasoningGym(level=1, mix="basic_arithmetic")
    item = env.items("test")[0]  # type: ignore[index]
    score = env.scorers["basic_arithmetic"].score_answer
    assert score(extract_answer(f"so it is {item.data['answer']}"), item.data) == 1.0
    # The dataset's scorer gives partial credit to near misses; success is 1.0 only.
    assert score(f"{item.data['answer']}1", item.data) < 1.0
    assert score("no idea", item.data) == 0.0


def test_splits_are_drawn_from_their_own_seeds_and_train_never_repeats_held_out() -> None:
    # Level 1 of basic_arithmetic has ~200 distinct questions: 90 held out of them, so
    # the training stream meets many of them and the runner must skip every one.
    env = ReasoningGym(level=1, mix="basic_arithmetic", val_size=30, test_size=60)
    val, test = env.items("val"), env.items("test")
    held_out = {i.content for i in [*val, *test]}  # type: ignore[union-attr]
    runner = Runner(env, None)  # type: ignore[arg-type]  # splits only: no server needed
    drawn = [i.content for i in itertools.islice(runner.train_items(), 400)]
    assert not held_out & set(drawn)
    assert runner.skipped_held_out > 0
    assert len({i.task for i in itertools.islice(ReasoningGym(level=1).items("train"), 6)}) == 3


@pytest.mark.slow
def test_swarmrl_train_trains_the_mix_and_never_the_eval(tmp_path: Path,
                                                         model_cache: Path) -> None:
    out = tmp_path / "run"
    train_attached(out, model_cache, [
        "examples.reasoning_gym.env:ReasoningGym", "--env-arg", "val_size=2", "--env-arg",
        "level=1", "--groups", "3", "--group-size", "2", "--max-tokens", "4"],
        train_options={"batch_size": "3", "batch_rule": "groups",
                       "task_mix": "basic_arithmetic:1,chain_sum:1,leg_counting:1"})
    rows = read_rollouts(out)
    evals = [r for r in rows if r["split"] == "val"]
    assert len([r for r in rows if r["split"] == "test"]) == 3 * 60  # once, at the end
    train = [r for r in rows if r["split"] == "train"]
    assert len(evals) == 12 and {r["task"] for r in evals} == {
        "basic_arithmetic", "chain_sum", "leg_counting"}  # before and after, 2 per task
    assert len(train) == 6 and all(r["trained"] for r in train)
    card = json.loads((out / "card.json").read_text())
    before = card["evals"][0]["figures"]
    assert before["n"] == 6 and "by_task" in before
    assert card["env"]["describe"]["level"] == 1
    steps = [json.loads(line) for line in (out / "data" / "metrics.jsonl").read_text().splitlines()]
    # The step trained each task's quota (one group of 2) and nothing else.
    assert steps[0]["reward/episodes"] == 6
    assert all(steps[0][f"task/{t}/episodes"] == 2 for t in {r["task"] for r in train})
    assert trained_episode_ids(out / "data") == {r["episode_id"] for r in train}


@pytest.mark.slow
def test_an_attached_run_resumes_where_it_stopped(tmp_path: Path, model_cache: Path) -> None:
    """``--target`` (a study's client): `swarmrl train` plays against a server it did not
    start, and started again on the same --out it keeps its eval before and its groups
    trained, and once finished plays nothing more."""
    from tests.helpers import ServerProcess

    server = ServerProcess(data_dir=tmp_path / "data", cache_dir=model_cache,
                           extra=["--train", "--train-option", "group_size=2",
                                  "--train-option", "batch_rule=groups"]).start()
    out = tmp_path / "client"

    def train(groups: int) -> None:
        subprocess.run(
            [sys.executable, "-m", "swarmrl", "train", "examples.reasoning_gym.env:ReasoningGym",
             "--env-arg", "mix=chain_sum", "--env-arg", "val_size=1", "--target", server.target,
             "--out", str(out), "--groups", str(groups), "--group-size", "2",
             "--max-tokens", "4", "--no-progress", "--env-arg", "test_size=1"],
            cwd=REPO, check=True, capture_output=True, timeout=300)

    try:
        train(1)  # a first start that stopped after one group (a crashed client)
        card = json.loads((out / "card.json").read_text())
        first = card["evals"][0]
        assert first["name"] == "before"
        # As if it died after training, before its last evaluations: the card holds
        # no val after, no selection, no test and is not finished.
        for key in ("test", "test_started", "selected", "finished"):
            card.pop(key, None)
        card["evals"] = [first]
        (out / "card.json").write_text(json.dumps(card))
        train(2)
        again = json.loads((out / "card.json").read_text())["evals"]
        assert again[0] == first  # kept, not replayed
        assert [e["name"] for e in again].count("before") == 1
        trained = [r for r in read_rollouts(out) if r["trained"]]
        assert len({r["group_id"] for r in trained}) == 2  # one more group, not two
        train(2)  # finished: plays nothing
        assert len([r for r in read_rollouts(out) if r["trained"]]) == len(trained)
        state = episode_states(server.target, [r["episode_id"] for r in trained])
        assert all(s[0] == "ended" for s in state.values())
    finally:
        server.stop()
