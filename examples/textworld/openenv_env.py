"""TextWorld as an OpenEnv environment: the same games, turns and reward as the native
`examples.textworld.env.TextWorld`, served by OpenEnv's own server.

    swarmrl train examples.textworld.openenv_env:TextWorldOpenEnv --env-arg level=2 ...
    python -m examples.textworld.openenv_env --port 8000   # a standalone OpenEnv server;
    swarmrl train openenv:http://127.0.0.1:8000 \\
        --env-arg hooks=examples.textworld.openenv_env:TextWorldHooks ...

`TextWorldEnv` is an OpenEnv ``Environment``: ``reset(seed)`` opens the game of that
seed (`env.make_games`, compiled once) as an `agent.Game` (the native loop's game), a
step plays the command the player's text names (`agent.picked`; anything else is
``look``, so free text never reaches the interpreter), and the last step (a win, a loss
or ``max_steps``) carries the native reward (`agent.Result.reward`). `TextWorldHooks` renders each observation as the
native agent's turn and gives the native items (seeds, game digests as content), so the
model sees the same messages and the same greedy play records the same tokens.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State

from examples.textworld.agent import CHOICES, Game
from examples.textworld.env import TextWorld, make_games
from swarmrl.envs import Item, Outcome, Split
from swarmrl.envs.openenv import Hooks, OpenEnv, Step


class TextWorldAction(Action):
    command: str
    """The player's text; the admissible command it names is played (else ``look``)."""


class TextWorldObservation(Observation):
    feedback: str = ""
    objective: str = ""
    commands: list[str] = []


class TextWorldEnv(Environment[TextWorldAction, TextWorldObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True  # one game process per session; GAME_LOCK guards

    def __init__(self, level: int = 2, max_steps: int = 4, choice: str = "text",
                 format_reward: float = 0.0, progress_reward: float = 0.5,
                 games_dir: str = "runs/textworld-games") -> None:
        super().__init__()
        self.level, self.games_dir = level, Path(games_dir)
        self._options = {"max_steps": max_steps, "choice": choice, "format_reward": format_reward,
                     "progress_reward": progress_reward}
        self._game: Game | None = None
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: Any) -> TextWorldObservation:
        self.close()
        path = make_games(self.level, [seed or 1], self.games_dir)[0]
        self._game = Game(path, **self._options)
        self._state = State(episode_id=episode_id, step_count=0)
        return self._observe()

    def _observe(self) -> TextWorldObservation:
        game = self._game
        assert game is not None
        r, done = game.result, game.over
        return TextWorldObservation(
            feedback=game.feedback, objective=game.objective, commands=game.commands,
            done=done, reward=r.reward if done else (None if r.steps == 0 else 0.0),
            metadata={"won": r.won, "steps": r.steps, "progress": r.progress})

    def step(self, action: TextWorldAction, timeout_s: float | None = None,
             **kwargs: Any) -> TextWorldObservation:
        if self._game is None:
            raise RuntimeError("step before reset")
        self._game.step(action.command)
        self._state.step_count += 1
        return self._observe()

    @property
    def state(self) -> State:
        return self._state

    def close(self) -> None:
        if self._game is not None:
            self._game.close()
            self._game = None


class TextWorldHooks(Hooks):
    """The native agent's messages, and the native environment's items."""

    def __init__(self, **native: Any) -> None:
        self.native = TextWorld(**native)
        self.choice = CHOICES[self.native.choice]

    def items(self, split: Split) -> list[Item]:
        # The native items (content: the game file's digest), reset by seed here.
        return [dataclasses.replace(item, data={"seed": int(item.id.removeprefix("seed"))})
                for item in self.native.items(split)]

    def start(self, step: Step) -> list[dict[str, Any]]:
        system = self.choice.system.format(objective=step.observation["objective"])
        return [{"role": "system", "content": system}, *self.choice.example,
                {"role": "user", "content": self.render(step)}]

    def render(self, step: Step) -> str:
        o = step.observation
        return self.choice.turn.format(feedback=o["feedback"], objective=o["objective"],
                                       commands=self.choice.listing(o["commands"]))

    def action(self, reply: str, step: Step) -> dict[str, Any]:
        return {"command": reply}

    def outcome(self, outcome: Outcome, steps: list[Step]) -> Outcome:
        return dataclasses.replace(outcome, success=bool(steps[-1].metadata.get("won")))


def TextWorldOpenEnv(level: int = 2, train_games: int = 64, val_games: int = 20,  # noqa: N802
                     test_games: int = 40, max_steps: int = 4, choice: str = "text",
                     format_reward: float = 0.0, progress_reward: float = 0.5,
                     games_dir: str = "runs/textworld-games", **adapter: Any) -> OpenEnv:
    """TextWorld through the OpenEnv adapter, with the native environment's arguments
    (other ``--env-arg`` values go to `OpenEnv`)."""
    game = dict(level=level, max_steps=max_steps, choice=choice, format_reward=format_reward,
                progress_reward=progress_reward, games_dir=games_dir)
    hooks = TextWorldHooks(train_games=train_games, val_games=val_games,
                           test_games=test_games, **game)
    return OpenEnv("examples.textworld.openenv_env:TextWorldEnv", env_args=game, hooks=hooks,
                   max_steps=max_steps, name="textworld-openenv", **adapter)


def main() -> None:
    """Serves `TextWorldEnv` with OpenEnv's create_app (for ``openenv:http://...``)."""
    import uvicorn
    from openenv.core.env_server.http_server import create_app

    p = argparse.ArgumentParser(description="TextWorld as an OpenEnv server")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-sessions", type=int, default=16)
    args = p.parse_args()
    app = create_app(TextWorldEnv, TextWorldAction, TextWorldObservation, env_name="textworld",
                     max_concurrent_envs=args.max_sessions)
    uvicorn.run(app, host="127.0.0.1", port=args.port)


if __name__ == "__main__":
    main()
