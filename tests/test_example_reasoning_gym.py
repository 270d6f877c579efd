"""The reasoning-gym example: its answer extraction and split, and a short real run.

The run uses the example's own pieces (the SDK client, the task mix, held-out eval)
against a real ``swarmrl serve --train`` on the tiny model: eval episodes are aborted
and never trained, training episodes end with the dataset scorer's reward, and a
trainer step takes each task's quota of groups.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from examples.env_runs import Score, Server, wilson
from examples.reasoning_gym.run import (
    Problems,
    ReasoningGym,
    build_parser,
    extract_answer,
    trainer_options,
)
from tests.envs_support import episode_states, trained_episode_ids
from tests.helpers import wait_until


def test_the_last_number_of_a_reply_is_scored_by_the_dataset() -> None:
    assert extract_answer("5 - 3 = 2") == "2"
    assert extract_answer("The answer is -14.") == "-14"
    assert extract_answer("no idea") == "no idea"
    problems = Problems("basic_arithmetic", 1, eval_size=4)
    entry = problems.held_out[0]
    assert problems.score(f"so it is {entry['answer']}", entry) == 1.0
    # The dataset's scorer gives partial credit to near misses; success is 1.0 only.
    assert problems.score(f"{entry['answer']}1", entry) < 1.0
    assert problems.score("no idea", entry) == 0.0


def test_training_problems_are_never_held_out_ones() -> None:
    # Level 1 of basic_arithmetic has ~200 distinct questions: 60 held out of them, so
    # the training generator meets many of them and must skip every one.
    problems = Problems("basic_arithmetic", 1, eval_size=60)
    held_out = {e["question"] for e in problems.held_out}
    drawn = [problems.next_train()["question"] for _ in range(400)]
    assert not held_out & set(drawn)
    assert problems.skipped > 0


def test_wilson_interval() -> None:
    low, high = wilson(0, 50)
    assert low == 0.0 and 0.06 < high < 0.08
    low, high = wilson(25, 50)
    assert low < 0.5 < high and abs((0.5 - low) - (high - 0.5)) < 1e-9
    assert str(Score(12, 60)).startswith("0.200 (12/60, 95% CI 0.118-0.318)")


@pytest.mark.slow
def test_short_run_trains_the_mix_and_never_the_eval(tmp_path: Path, model_cache: Path) -> None:
    args = build_parser().parse_args(
        ["--model", "tiny", "--eval-size", "2", "--group-size", "2", "--parallel-groups", "3",
         "--batch-groups", "3", "--max-tokens", "4",
         # Tiny's rewards are all 0, so varied_groups would drop every group.
         "--train-option", "batch_rule=groups"])
    env = ReasoningGym(args)
    server = Server.start("tiny", trainer_options(args), tmp_path / "data", tmp_path / "server.log",
                          ["--cache-dir", str(model_cache)])
    try:
        evals = asyncio.run(env.evaluate(server))
        train = asyncio.run(env.train_round(server, 0))
        wait_until(lambda: len(server.steps()) >= 1, 60, "a training step")
        step = server.steps()[0]
        state = episode_states(server.target, [r["episode_id"] for r in evals + train])
    finally:
        server.stop()
    assert len(evals) == 6 and {r["task"] for r in evals} == set(env.mix)
    assert len(train) == 6 and all("error" not in r for r in train)
    assert all(state[r["episode_id"]][0] == "aborted" for r in evals)
    assert all(state[r["episode_id"]][:2] == ("ended", r["reward"]) for r in train)
    # The step trained each task's quota (one group of 2) and nothing else.
    assert step["reward/episodes"] == 6
    assert all(step[f"task/{t}/episodes"] == 2 for t in env.mix)
    assert trained_episode_ids(tmp_path / "data") == {r["episode_id"] for r in train}


@pytest.mark.slow
def test_an_attached_run_resumes_where_it_stopped(tmp_path: Path, model_cache: Path) -> None:
    """``--target`` (a study's client): the example plays against a server it did not
    start, and started again on the same --out it keeps its eval before, keeps its first
    start's training deadline, and once finished plays nothing more."""
    from examples.reasoning_gym.run import main

    args = build_parser().parse_args(
        ["--model", "tiny", "--mix", "chain_sum:1", "--group-size", "2", "--batch-groups", "1",
         "--train-option", "batch_rule=groups"])
    server = Server.start("tiny", trainer_options(args), tmp_path / "data", tmp_path / "server.log",
                          ["--cache-dir", str(model_cache)])
    out = tmp_path / "client"
    client = ["--model", "tiny", "--target", server.target, "--data-dir", str(tmp_path / "data"),
              "--out", str(out), "--mix", "chain_sum:1", "--eval-size", "1", "--group-size", "2",
              "--parallel-groups", "1", "--max-tokens", "4", "--train-minutes", "10"]
    try:
        # A first start that stopped after its eval and one round (a crashed client).
        assert main([*client, "--train-rounds", "1"]) == 0
        first = (out / "eval-before.jsonl").read_text()
        started = (out / "train-started").read_text()
        (out / "summary.json").unlink()  # as if it died before writing it
        assert main([*client, "--train-rounds", "1"]) == 0
        assert (out / "eval-before.jsonl").read_text() == first  # kept, not replayed
        assert (out / "train-started").read_text() == started  # the first deadline holds
        episodes = (out / "train-episodes.jsonl").read_text().count("\n")
        assert episodes == 4  # two rounds of one group of 2, appended
        # Finished: started again, it returns its summary and plays nothing.
        assert main(client) == 0
        assert (out / "train-episodes.jsonl").read_text().count("\n") == episodes
        assert server.alive()  # an attached run never stops the server
    finally:
        server.stop()
