"""The TextWorld recipe: command choice, splits by content, and a short real run.

Through `swarmrl train examples.textworld.env:TextWorld` on the tiny model: the agent
plays multi-turn games through the episode's shim URL and key, each turn's prompt
extends the last so an episode's calls merge into one timeline, eval episodes are
aborted and never trained, and the same agent runs under ``swarmrl run``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from examples.textworld.agent import CHOICES, Result, choose, clean, open_game, play
from examples.textworld.baselines import rates, wins
from examples.textworld.env import TEST_SEED_BASE, TextWorld, make_games
from swarmrl.envs import Runner
from tests.envs_support import read_rollouts, train_attached
from tests.helpers import REPO
from tests.store_support import trained_episode_ids


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


def test_the_progress_reward_pays_for_the_share_of_the_quest_done(textworld_games: Path) -> None:
    game = make_games(2, [1], textworld_games)[0]  # a two-command quest, scored 0/1 until the win
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


def test_policies_without_a_model_give_the_chance_rate(textworld_games: Path) -> None:
    games = make_games(1, [TEST_SEED_BASE + 1, TEST_SEED_BASE + 2], textworld_games)
    assert not any(wins(g, lambda commands: "look", max_steps=4) for g in games)
    chance = rates(games, max_steps=4, trials=3)
    assert (chance["random"][1], chance["first"][1]) == (6, 2)
    assert rates(games, max_steps=4, trials=3) == chance  # seeded: the same plays again


def test_held_out_games_are_told_apart_by_content_not_by_name(tmp_path: Path) -> None:
    """The split check reads the game files: a training game that is byte for byte a test
    game (the same seed compiled under another name) is never played."""
    import shutil

    env = TextWorld(level=1, train_games=2, val_games=1, test_games=1,
                    games_dir=str(tmp_path / "games"))
    test_game = Path(env.items("test")[0].data["game"])
    train_dir = tmp_path / "games" / "level1"
    shutil.copy(test_game, train_dir / "seed2.z8")  # train seed 2 is now the test game
    shutil.copy(test_game.with_suffix(".json"), train_dir / "seed2.json")
    assert {i.id for i in env.items("train")} == {"seed1", "seed2"}
    runner = Runner(env, None)  # type: ignore[arg-type]  # splits only: no server needed
    items = runner.train_items()
    assert {next(items).id for _ in range(4)} == {"seed1"} and runner.skipped_held_out >= 1


@pytest.mark.slow
def test_swarmrl_train_merges_turns_and_never_trains_the_eval(
        tmp_path: Path, model_cache: Path, textworld_games: Path) -> None:
    out = tmp_path / "run"
    games = str(textworld_games)
    train_attached(out, model_cache, [
        "examples.textworld.env:TextWorld", "--env-arg", "level=1", "--env-arg", "train_games=1",
        "--env-arg", "val_games=1", "--env-arg", "test_games=1", "--env-arg", "max_steps=3",
        "--env-arg", f"games_dir={games}", "--groups", "1", "--group-size", "2",
        "--max-tokens", "4"], train_options={"batch_size": "1", "batch_rule": "groups"})
    rows = read_rollouts(out)
    evals = [r for r in rows if r["split"] == "val"]
    train = [r for r in rows if r["split"] == "train"]
    assert len(evals) == 2 and len(train) == 2 and all(r["trained"] for r in train)
    tests = [r for r in rows if r["split"] == "test"]
    assert len(tests) == 1 and not tests[0]["trained"]
    assert all(r["policy_versions"] for r in evals)
    consumed = trained_episode_ids(out / "data")
    assert consumed == {r["episode_id"] for r in train}
    # Multi-turn: one call per command, and every episode's calls merge into one timeline
    # (the trainer's own merge_calls, on the store).
    from swarmrl_server.timelines.merge import merge_calls
    from tests.store_support import stored_episodes

    episodes = stored_episodes(out / "data")
    for r in train:
        episode_calls = episodes[r["episode_id"]].calls
        assert len(episode_calls) == r["metrics"]["steps"] > 1
        timelines, stats = merge_calls(episode_calls)
        assert stats.timelines == 1 and stats.forks == 0
    assert not {r["episode_id"] for r in evals} & consumed

    # The same agent as a standalone program under `swarmrl run`.
    from tests.helpers import ServerProcess

    server = ServerProcess(data_dir=tmp_path / "data2", cache_dir=model_cache, http_port=0).start()
    try:
        card = json.loads((out / "card.json").read_text())  # the run's record
        assert card["env"]["describe"]["level"] == 1
        z8 = next((textworld_games / "level1").glob("seed1.z8"))
        done = subprocess.run(
            [sys.executable, "-m", "swarmrl._run", "--target", server.target, "--task-id",
             f"textworld/{z8.stem}", "--", sys.executable, "-m", "examples.textworld.agent",
             "--game", str(z8), "--max-steps", "2"],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["steps"] >= 1 and 0.0 <= result["reward"] <= 1.0
