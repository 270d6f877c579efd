"""The TextWorld example: command choice, and a short real run on generated games.

Against a real ``swarmrl serve --train`` on the tiny model: the OpenAI-client agent
plays multi-turn games through the episode's shim URL and key, each turn's prompt
extends the last so an episode's calls merge into one timeline, eval episodes are
aborted and never trained, and the same agent runs under ``swarmrl run``.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from examples.env_runs import Server, merge_report, plot_episode_rewards, train_options
from examples.textworld.agent import CHOICES, Result, choose, clean, open_game, play
from examples.textworld.baselines import rates, wins
from examples.textworld.run import EVAL_SEED_BASE, TextWorld, build_parser, make_games
from tests.envs_support import episode_states, trained_episode_ids
from tests.helpers import REPO, wait_until


def test_a_reply_picks_a_command_by_number_or_name() -> None:
    commands = ["go east", "open box", "take key"]
    assert choose("2", commands) == "open box"
    assert choose(" 3. take key", commands) == "take key"
    assert choose("I would take key now", commands) == "take key"
    assert choose("7", commands) == "look"  # out of range, names nothing: a spent step
    assert choose("\ufffd\ufffd", commands) == "look"
    assert clean("You open it.\n\n>   -= Studio =-0/1") == "You open it."


def test_a_text_reply_picks_the_command_it_names_first() -> None:
    commands = ["examine glass", "take glass", "take glass from cabinet"]
    assert choose("Take glass from cabinet.", commands, numbered=False) == (
        "take glass from cabinet")  # the longest of those starting there
    assert choose("examine glass, then take glass", commands, numbered=False) == (
        "examine glass")  # the first named
    assert choose("2", commands, numbered=False) == "look"  # no numbers in this listing
    assert choose("2", commands) == "take glass"
    assert CHOICES["text"].listing(commands) == "\n".join(commands)
    assert CHOICES["number"].listing(commands).splitlines()[1] == "2. take glass"


def test_the_format_reward_pays_for_picked_turns_only() -> None:
    lost = Result(won=False, score=0, max_score=1, steps=4, picked=3)
    assert lost.reward == 0.0  # without the option: the game's reward alone
    lost.format_reward = 0.2
    assert lost.reward == pytest.approx(0.2 * 3 / 4)
    won = Result(won=True, score=1, max_score=1, steps=1, picked=1, format_reward=0.2)
    assert won.reward == pytest.approx(1.2)
    assert Result(won=False, score=0, max_score=0, steps=0, format_reward=0.2).reward == 0.0


class _Scripted:
    """An OpenAI client whose replies are a script (the shape `play` reads)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = iter(replies)
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _create(self, **_: object) -> SimpleNamespace:
        message = SimpleNamespace(content=next(self.replies))
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])


def test_the_progress_reward_pays_for_the_share_of_the_quest_done(tmp_path: Path) -> None:
    game = make_games(2, [1], tmp_path)[0]  # a two-command quest, scored 0/1 until the win
    env = open_game(game, 4)
    walkthrough = env.reset()[1]["policy_commands"]
    env.close()
    assert len(walkthrough) == 2
    half = play(game, _Scripted(["inventory", walkthrough[0], "look"]), "m",  # type: ignore[arg-type]
                max_steps=3, choice="text", progress_reward=0.5)
    assert (half.won, half.score, half.progress) == (False, 0, 0.5)
    assert half.reward == pytest.approx(0.25)
    won = play(game, _Scripted(walkthrough), "m", max_steps=3, choice="text",  # type: ignore[arg-type]
               progress_reward=0.5)
    assert (won.won, won.progress, won.steps) == (True, 1.0, 2)
    assert won.reward == pytest.approx(1.5)
    none = play(game, _Scripted(["look"] * 3), "m", max_steps=3, choice="text")  # type: ignore[arg-type]
    assert none.progress == 0.0 and none.reward == 0.0


def test_episode_rewards_plot_one_line_per_run(tmp_path: Path) -> None:
    runs = {}
    for name, reward in (("a", 0.1), ("b", 0.5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "train-episodes.jsonl").write_text(
            "".join(json.dumps({"reward": reward, "game": "g"}) + "\n" for _ in range(10)))
        runs[name] = tmp_path / name
    out = plot_episode_rewards(runs, tmp_path / "rewards.png", window=4)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_policies_without_a_model_give_the_chance_rate(tmp_path: Path) -> None:
    games = make_games(1, [EVAL_SEED_BASE + 1, EVAL_SEED_BASE + 2], tmp_path)
    assert not any(wins(g, lambda commands: "look", max_steps=4) for g in games)
    chance = rates(games, max_steps=4, trials=3)
    assert (chance["random"].n, chance["first"].n) == (6, 2)
    assert rates(games, max_steps=4, trials=3) == chance  # seeded: the same plays again


@pytest.mark.slow
def test_short_run_merges_turns_and_never_trains_the_eval(tmp_path: Path,
                                                          model_cache: Path) -> None:
    args = build_parser().parse_args(
        ["--model", "tiny", "--games-dir", str(tmp_path / "games"), "--train-games", "1",
         "--eval-games", "1", "--group-size", "2", "--parallel-groups", "1",
         "--batch-groups", "1", "--max-steps", "3", "--train-option", "batch_rule=groups"])
    env = TextWorld(args)
    assert not {g.name for g in env.train_games} & {g.name for g in env.eval_games}
    server = Server.start("tiny", train_options(args), tmp_path / "data", tmp_path / "server.log",
                          ["--cache-dir", str(model_cache)])
    try:
        evals = asyncio.run(env.evaluate(server))
        train = asyncio.run(env.train_round(server, 0))
        wait_until(lambda: len(server.steps()) >= 1, 60, "a training step")
        step = server.steps()[0]
        # The same agent as a standalone program under `swarmrl run`.
        game = env.train_games[0]
        done = subprocess.run(
            [sys.executable, "-m", "swarmrl._run", "--target", server.target, "--task-id",
             f"textworld/{game.stem}", "--", sys.executable, "-m", "examples.textworld.agent",
             "--game", str(game), "--max-steps", "2"],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        state = episode_states(server.target, [r["episode_id"] for r in evals + train])
    finally:
        server.stop()
    assert all(state[r["episode_id"]][0] == "aborted" for r in evals)
    assert all(state[r["episode_id"]] == ("ended", r["reward"], r["steps"]) for r in train)
    # Multi-turn: one call per command, and every episode's calls merged into one timeline.
    calls = sum(r["steps"] for r in train)
    assert calls > len(train)
    assert step["merge/calls"] == calls and step["merge/timelines"] == len(train)
    assert trained_episode_ids(tmp_path / "data") == {r["episode_id"] for r in train}
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["steps"] >= 1 and 0.0 <= result["reward"] <= 1.0
    # From the store, by the trainer's merge_calls: the group and the `swarmrl run` episode.
    merged = merge_report(tmp_path / "data")
    assert merged["trained"]["episodes"] == len(train) + 1
    assert merged["trained"]["calls"] == calls + result["steps"]
    assert merged["trained"]["timelines"] == len(train) + 1 and merged["trained"]["forks"] == 0
    assert merged["trained"]["tokens_as_timelines"] < merged["trained"]["tokens_as_calls"]
    assert merged["eval"]["episodes"] == len(evals) and merged["eval"]["forks"] == 0
