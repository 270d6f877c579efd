"""TextWorld as a verifiers 0.4 environment: the native games, turns and reward.

    make verifiers-venv     # .venv-verifiers: verifiers 0.4, textworld, the swarmrl SDK
    PYTHONPATH=examples/textworld .venv-verifiers/bin/python -m swarmrl train \\
        verifiers:vf_textworld --env-arg taskset.level=2 --max-tokens 12 ...

A verifiers environment package (``verifiers init``'s shape: `TextWorldTaskset` and
`TextWorldEnv` exported through ``__all__``) that knows nothing of swarmrl's training:

- `TextWorldTaskset` loads the native environment's games (``env.TextWorld.items``:
  the same seeds per split, compiled once into ``games_dir``); its config's ``split``
  field names the split, so swarmrl's adapter loads it once per split. A task's prompt
  is the game's opening as the native agent shows it (``agent.Game.opening`` and the
  first ``turn``); its ``digest`` is the game file's, the native item's content.
- `TextWorldEnv` plays the game itself (``agent.Game``, the native loop's game): the
  ``player`` answers each turn through ``agent.interaction()``, the env plays the command
  the reply picks, and sends the next turn until a win, a loss or ``max_steps``. The
  trace's reward is the native reward (``agent.Result.reward``, recorded as ``game``);
  its ``success`` metric is the win.

So the same greedy play records the same tokens natively, through OpenEnv and here
(``tests/sdk/envs/test_envs_textworld_forms.py``).
"""

import asyncio

import verifiers.v1 as vf

from examples.textworld.agent import Game
from examples.textworld.env import TextWorld


class TextWorldData(vf.TaskData):
    game: str
    """The compiled game (.z8, its .json beside)."""
    digest: str
    """The game file's sha256 (the native item's content)."""
    max_steps: int
    choice: str
    format_reward: float
    progress_reward: float


class TextWorldTask(vf.Task[TextWorldData]):
    pass


class TextWorldConfig(vf.TasksetConfig):
    """The native environment's arguments (``env.TextWorld``), and the split to load."""

    split: str = "train"
    level: int = 2
    train_games: int = 64
    val_games: int = 20
    test_games: int = 40
    max_steps: int = 4
    choice: str = "text"
    format_reward: float = 0.0
    progress_reward: float = 0.5
    games_dir: str = "runs/textworld-games"


class TextWorldTaskset(vf.Taskset[TextWorldTask, TextWorldConfig]):
    def load(self) -> list[TextWorldTask]:
        c = self.config
        play = dict(max_steps=c.max_steps, choice=c.choice, format_reward=c.format_reward,
                    progress_reward=c.progress_reward)
        native = TextWorld(level=c.level, train_games=c.train_games, val_games=c.val_games,
                           test_games=c.test_games, games_dir=c.games_dir, **play)
        tasks = []
        for item in native.items(c.split):
            game = Game(item.data["game"], **play)
            try:
                (system, *example), first = game.opening(), game.turn()
            finally:
                game.close()
            tasks.append(TextWorldTask(TextWorldData(
                id=item.id, game=item.data["game"], digest=item.content,
                system_prompt=system["content"],
                prompt=[*example, {"role": "user", "content": first}], **play), c.task))
        return tasks


class TextWorldEnvConfig(vf.EnvConfig):
    # A text game: the player chats (verifiers' null harness: no tools of its own), so it
    # needs no sandbox and runs in the subprocess runtime.
    player: vf.AgentConfig = vf.AgentConfig.model_validate(
        {"harness": {"id": "null"}, "runtime": {"type": "subprocess"}})


class TextWorldEnv(vf.Env[TextWorldEnvConfig]):
    async def run(self, task, agents):
        data = task.data
        # textworld blocks (and guards its parser with a lock): off the event loop.
        game = await asyncio.to_thread(
            Game, data.game, max_steps=data.max_steps, choice=data.choice,
            format_reward=data.format_reward, progress_reward=data.progress_reward)
        try:
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn()  # the task's prompt is the first turn
                while not segment.terminated:
                    await asyncio.to_thread(game.step, segment.last_reply)
                    if game.over:
                        break
                    segment = await interaction.turn(game.turn())
        finally:
            await asyncio.to_thread(game.close)
        result, trace = game.result, interaction.trace
        trace.record_reward("game", result.reward, 1.0)
        trace.record_metric("success", float(result.won))
        trace.record_metric("steps", float(result.steps))
        trace.record_metric("progress", result.progress)
        trace.record_metric("picked", float(result.picked))


__all__ = ["TextWorldEnv", "TextWorldTaskset"]
