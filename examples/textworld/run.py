"""TextWorld: games generated offline, an OpenAI-client agent, training and held-out eval.

    python -m examples.textworld.run --model smollm2 --level 1 --train-minutes 30 --out runs/tw
    python -m examples.textworld.run --model smollm2 --level 2 --train-minutes 0   # base rate

**Games.** TextWorld's own generator (``textworld.generator.make_game`` +
``compile_game``, what ``tw-make custom`` runs) makes every game at the ``--level`` in
`LEVELS` (rooms, objects, quest length); training games come from seeds
``1..--train-games``, held-out games from ``EVAL_SEED_BASE + 1..--eval-games``, so the
two sets share no game. They are written once to ``--games-dir`` (``.z8`` and the
``.json`` beside it) and reused.

**Playing.** Each episode runs `examples.textworld.agent.play` (a plain ``openai``
client program: multi-turn, up to ``--max-steps`` commands) with an ``OpenAI`` client
made from the episode's ``openai_base_url`` and ``openai_api_key``: every call lands in
that episode through the shim. A training round plays ``--parallel-groups`` games,
``--group-size`` episodes each (a GRPO group), and ends every episode with its reward.
Eval plays each held-out game once, greedily, and aborts the episode (never trained).
The same agent runs alone under ``swarmrl run`` (README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from openai import OpenAI

import swarmrl
from examples.env_runs import Server, add_common_args, gather_limited, run_from_args, train_options
from examples.textworld.agent import GAME_LOCK, add_play_args, play

EVAL_SEED_BASE = 100_000

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

    out = []
    for seed in seeds:
        path = games_dir / f"level{level}" / f"seed{seed}.z8"
        if not (path.is_file() and path.with_suffix(".json").is_file()):
            options = textworld.GameOptions()
            for key, value in LEVELS[level].items():
                setattr(options, key, value)
            options.seeds = seed
            options.path = str(path)
            options.file_ext = ".z8"
            options.force_recompile = True
            with GAME_LOCK:
                compile_game(make_game(options), options)
        out.append(path)
    return out


class TextWorld:
    """The `Environment` of `examples.env_runs`: the agent over the episode's shim URL."""

    name = "textworld"

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        games_dir = Path(args.games_dir)
        # An eval-only run (the base rate) needs no training games.
        self.train_games = make_games(
            args.level, list(range(1, args.train_games + 1)) if args.train_minutes > 0 else [],
            games_dir)
        self.eval_games = make_games(
            args.level, [EVAL_SEED_BASE + i for i in range(1, args.eval_games + 1)], games_dir)
        self.rng = random.Random(args.seed)

    async def _episode(self, client: swarmrl.AsyncSwarmClient, game: Path, group_id: str | None,
                       *, evaluate: bool) -> dict[str, Any]:
        task = f"textworld/level{self.args.level}/{game.stem}"
        async with client.episode(task_id=task, group_id=group_id,
                                  agent_version=f"textworld-agent/{self.args.choice}") as ep:
            model = ep.models[0].name if ep.models else self.args.model
            openai = OpenAI(base_url=ep.openai_base_url, api_key=ep.openai_api_key)
            result = await asyncio.to_thread(
                play, game, openai, model, max_steps=self.args.max_steps,
                temperature=0.0 if evaluate else self.args.temperature,
                max_tokens=self.args.max_tokens, format_reward=self.args.format_reward,
                progress_reward=self.args.progress_reward, choice=self.args.choice)
            if evaluate:
                await ep.abort("held-out evaluation")  # never trained on
            else:
                await ep.reward(result.reward)
        return {"episode_id": ep.id, "game": game.stem, "reward": result.reward, **asdict(result)}

    async def evaluate(self, server: Server) -> list[dict[str, Any]]:
        async with swarmrl.AsyncSwarmClient(server.target) as client:
            jobs = [lambda g=g: self._episode(client, g, None, evaluate=True)
                    for g in self.eval_games]
            results = await gather_limited(self.args.concurrency, jobs)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise RuntimeError(f"{len(failed)} evaluation episodes failed: {failed[0]!r}")
        return [{**r, "success": r["won"]} for r in results]

    async def train_round(self, server: Server, round_index: int) -> list[dict[str, Any]]:
        async with swarmrl.AsyncSwarmClient(server.target) as client:
            jobs = []
            for game in self.rng.sample(self.train_games, self.args.parallel_groups):
                group = uuid.uuid4().hex
                jobs += [lambda g=game, gid=group: self._episode(client, g, gid, evaluate=False)
                         for _ in range(self.args.group_size)]
            results = await gather_limited(len(jobs), jobs)
        return [r if not isinstance(r, BaseException) else {"error": repr(r)} for r in results]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p)
    p.add_argument("--level", type=int, default=1, choices=sorted(LEVELS), help="difficulty")
    p.add_argument("--games-dir", default="runs/textworld-games", help="compiled games (reused)")
    p.add_argument("--train-games", type=int, default=64)
    p.add_argument("--eval-games", type=int, default=40, help="held-out games")
    p.add_argument("--max-steps", type=int, default=4, help="commands per game")
    add_play_args(p)
    p.set_defaults(out="runs/textworld", parallel_groups=2, batch_groups=2, max_tokens=4,
                   concurrency=16)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    env = TextWorld(args)
    summary = run_from_args(env, args, train_options(args), describe={
        "level": args.level, "game_options": LEVELS[args.level], "max_steps": args.max_steps,
        "eval_games": args.eval_games, "eval_seed_base": EVAL_SEED_BASE,
        "choice": args.choice, "max_tokens": args.max_tokens})
    return 0 if "before" in summary else 1


if __name__ == "__main__":
    raise SystemExit(main())
