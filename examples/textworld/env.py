"""TextWorld as a swarmrl environment: generated games, played by a plain OpenAI-client agent.

    swarmrl train examples.textworld.env:TextWorld --model smollm2 --engine vllm \\
        --env-arg level=2 --env-arg progress_reward=0.5 --minutes 38 --temperature 0.7 \\
        --max-tokens 12 --eval-every 5 --train-option lr=1e-3 --train-option lora_rank=16 \\
        --train-option lora_alpha=32 --train-option packing=true \\
        --train-option batch_rule=varied_groups --train-option batch_size=2 (README: seeds)

**Games.** TextWorld's own generator (``textworld.generator.make_game`` + ``compile_game``,
what ``tw-make custom`` runs) makes every game at the ``level`` (`LEVELS`): train games
from seeds ``1..train_games``, val from ``VAL_SEED_BASE + 1..``, test from
``TEST_SEED_BASE + 1..`` (the held-out set of the earlier runs). They are compiled once
into ``games_dir`` and reused; a game is compiled in a directory of its own and then
renamed into place, so runs sharing ``games_dir`` never read half a game. An item's content is its game file's bytes, so a game
compiled twice under different seeds is still caught by the runner's split check.
``test_seed_base=B`` (an env arg, recorded in ``describe()``) makes a fresh test set from
``B + 1..`` instead, leaving out any game whose file is a val game's or one of the
earlier test set's (those chose configurations before); val stays as it was. The default
``TEST_SEED_BASE`` gives the earlier test set itself.

**Playing.** `examples.textworld.agent.play` (an ordinary ``openai`` client program,
multi-turn, up to ``max_steps`` commands) with a client bound to the rollout's episode:
every call lands in that episode through the shim, and each turn's prompt extends the
last, so an episode merges into one timeline. Reward and success are the agent's
(`agent.Result`): success is the win.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from openai import OpenAI

from examples.textworld.agent import CHOICES, GAME_LOCK, Result, play
from swarmrl.envs import Environment, Item, Outcome, Rollout, Split

VAL_SEED_BASE = 200_000
TEST_SEED_BASE = 100_000

# Generator settings per level (textworld.GameOptions): level 1 is the easiest.
LEVELS: dict[int, dict[str, int]] = {
    1: dict(nb_rooms=1, nb_objects=3, quest_length=1),
    2: dict(nb_rooms=1, nb_objects=4, quest_length=2),
    3: dict(nb_rooms=2, nb_objects=4, quest_length=2),
}


def make_games(level: int, seeds: list[int], games_dir: Path) -> list[Path]:
    """Compiles (or reuses) one game per seed at the level; returns the .z8 paths."""
    import textworld
    from textworld.generator import compile_game, make_game
    from textworld.generator.data import KnowledgeBase

    out = []
    for seed in seeds:
        path = games_dir / f"level{level}" / f"seed{seed}.z8"
        if not (path.is_file() and path.with_suffix(".json").is_file()):
            options = textworld.GameOptions()
            # The knowledge base textworld parsed at import: a GameOptions left to itself
            # parses the logic files again for every game (~0.3 s of a ~0.8 s game). The
            # game files come out byte for byte the same.
            options.kb = KnowledgeBase.default()
            for key, value in LEVELS[level].items():
                setattr(options, key, value)
            options.seeds = seed
            # TextWorld writes the .json first and the .z8 as Inform compiles: build
            # aside, then rename (the .json last: with both there, the game is whole).
            build = path.parent / f".{path.stem}-{uuid.uuid4().hex}"
            options.path = str(build / path.name)
            options.file_ext = ".z8"
            options.force_recompile = True
            with GAME_LOCK:
                compile_game(make_game(options), options)
            os.replace(build / path.name, path)
            os.replace(build / path.with_suffix(".json").name, path.with_suffix(".json"))
            shutil.rmtree(build, ignore_errors=True)
        out.append(path)
    return out


def game_item(game: Path, level: int) -> Item:
    """A game as an item: its path to play, the game file's digest as its content."""
    digest = hashlib.sha256(game.read_bytes()).hexdigest()
    return Item(game.stem, {"game": str(game)}, task=f"textworld/level{level}", content=digest)


class TextWorld(Environment):
    """Games at a level; how the agent replies and is rewarded (`agent.play`'s options)."""

    name = "textworld"

    def __init__(self, level: int = 2, train_games: int = 64, val_games: int = 20,
                 test_games: int = 40, max_steps: int = 4, choice: str = "text",
                 format_reward: float = 0.0, progress_reward: float = 0.5,
                 max_tokens: int = 12, games_dir: str = "runs/textworld-games",
                 test_seed_base: int = TEST_SEED_BASE) -> None:
        if level not in LEVELS or choice not in CHOICES:
            raise ValueError(f"level must be one of {sorted(LEVELS)}, choice one of "
                             f"{sorted(CHOICES)}")
        self.level, self.max_steps, self.choice = level, max_steps, choice
        self.format_reward, self.progress_reward = format_reward, progress_reward
        self.max_tokens = max_tokens
        self.counts = {"train": train_games, "val": val_games, "test": test_games}
        self.games_dir = Path(games_dir)
        self.test_seed_base = test_seed_base

    def describe(self) -> dict[str, Any]:
        return {"level": self.level, "game_options": LEVELS[self.level], "counts": self.counts,
                "max_steps": self.max_steps, "choice": self.choice,
                "format_reward": self.format_reward, "progress_reward": self.progress_reward,
                "max_tokens": self.max_tokens, "val_seed_base": VAL_SEED_BASE,
                "test_seed_base": self.test_seed_base}

    def items(self, split: Split) -> list[Item]:
        if split == "test" and self.test_seed_base != TEST_SEED_BASE:
            return self._fresh_test()
        base = {"train": 0, "val": VAL_SEED_BASE, "test": TEST_SEED_BASE}[split]
        return self._games(base, 1, self.counts[split])

    def _games(self, base: int, first: int, n: int) -> list[Item]:
        seeds = [base + i for i in range(first, first + n)]
        return [game_item(g, self.level) for g in make_games(self.level, seeds, self.games_dir)]

    def _fresh_test(self) -> list[Item]:
        """``test_games`` games from ``test_seed_base + 1`` on, none of them a val game or
        a game of the earlier test set (by file content); at most 4x as many made."""
        taken = {str(i.content) for split in ("val", "test")
                 for i in self._games({"val": VAL_SEED_BASE, "test": TEST_SEED_BASE}[split],
                                      1, self.counts[split])}
        n, out, first = self.counts["test"], [], 1
        while len(out) < n and first <= 4 * n:
            batch = self._games(self.test_seed_base, first, n - len(out))
            for item in batch:
                if item.content not in taken:
                    out.append(item)
                    taken.add(str(item.content))
            first += len(batch)
        if len(out) < n:
            raise ValueError(f"test_seed_base={self.test_seed_base}: only {len(out)} of "
                             f"{4 * n} games are new; {n} are needed")
        return out

    def play_game(self, game: str, client: OpenAI, model: str, temperature: float,
                  max_tokens: int | None) -> Result:
        """One game with this environment's settings (the OpenEnv and verifiers forms play
        the same `agent.Game` with the same settings, so the three forms play alike)."""
        return play(game, client, model, max_steps=self.max_steps, temperature=temperature,
                    max_tokens=max_tokens or self.max_tokens, format_reward=self.format_reward,
                    progress_reward=self.progress_reward, choice=self.choice)

    async def play(self, rollout: Rollout) -> Outcome:
        temperature = rollout.sampling.temperature
        with OpenAI(base_url=rollout.base_url, api_key=rollout.api_key) as client:
            result = await asyncio.to_thread(
                self.play_game, rollout.item.data["game"], client, rollout.model,
                1.0 if temperature is None else temperature, rollout.sampling.max_tokens)
        return Outcome(reward=result.reward, success=result.won,
                       metrics={"steps": float(result.steps), "progress": result.progress,
                                "picked": float(result.picked)},
                       info={k: v for k, v in asdict(result).items() if k in ("commands",
                                                                               "replies")})
