"""What a held-out win rate is worth: the same games played by policies with no model.

    python -m examples.textworld.baselines --level 2 --test-games 40 --trials 20

A trained agent that has learned only to answer with *some* command number scores what
these score, so a gain is measured against them as well as against the base model:

- ``random``: each turn, a uniformly random admissible command (`--trials` plays per
  game, from seeded generators);
- ``first``: always command 1 of the sorted list the agent is shown;

each up to ``--max-steps`` commands per game, as the agent plays (`agent.open_game`).
Prints each policy's win rate with its 95% Wilson interval.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from pathlib import Path

from examples.textworld.agent import GAME_LOCK, open_game
from examples.textworld.env import TEST_SEED_BASE, make_games
from swarmrl.envs import wilson

Policy = Callable[[list[str]], str]


def wins(game: Path, policy: Policy, max_steps: int) -> bool:
    """Plays `game` with `policy` (sorted admissible commands -> command) to a win, a loss
    or `max_steps` commands."""
    env = open_game(game, max_steps)
    try:
        with GAME_LOCK:
            _, infos = env.reset()
        for _ in range(max_steps):
            with GAME_LOCK:
                _, _, done, infos = env.step(policy(sorted(infos["admissible_commands"])))
            if infos["won"] or done:
                return bool(infos["won"])
        return False
    finally:
        with GAME_LOCK:
            env.close()


def rates(games: list[Path], max_steps: int, trials: int,
          seed: int = 0) -> dict[str, tuple[int, int]]:
    """Each policy's (wins, plays) over the games (``random``: `trials` plays a game)."""
    rng = random.Random(seed)
    played = {
        "random": [wins(g, rng.choice, max_steps) for g in games for _ in range(trials)],
        "first": [wins(g, lambda commands: commands[0], max_steps) for g in games],
    }
    return {name: (sum(w), len(w)) for name, w in played.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--level", type=int, default=1, choices=(1, 2, 3))
    p.add_argument("--games-dir", default="runs/textworld-games", help="compiled games (reused)")
    p.add_argument("--test-games", type=int, default=40, help="test games (as env.py's)")
    p.add_argument("--max-steps", type=int, default=4, help="commands per game")
    p.add_argument("--trials", type=int, default=20, help="random plays per game")
    args = p.parse_args(argv)
    games = make_games(args.level, [TEST_SEED_BASE + i for i in range(1, args.test_games + 1)],
                       Path(args.games_dir))
    for name, (won, n) in rates(games, args.max_steps, args.trials).items():
        low, high = wilson(won, n)
        print(f"{name:<8} test wins {won / n:.3f} ({won}/{n}, 95% CI {low:.3f}-{high:.3f}; "
              "plays of one game are not independent, so the interval is too narrow)")


if __name__ == "__main__":
    main()
