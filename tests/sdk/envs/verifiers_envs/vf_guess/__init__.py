"""Guess the number: the env plays the user, answering each guess with higher or lower."""

import re

import verifiers.v1 as vf


class GuessData(vf.TaskData):
    secret: int


class GuessTask(vf.Task[GuessData]):
    pass


class GuessConfig(vf.TasksetConfig):
    low: int = 1
    high: int = 16
    split: str = "train"
    """train: secrets low..high; val and test: a few fixed ones."""


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()
    turns: int = 3


class GuessEnv(vf.Env[GuessEnvConfig]):
    async def run(self, task, agents):
        won = False
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            for turn in range(self.config.turns):
                numbers = re.findall(r"\d+", segment.last_reply)
                guess = int(numbers[0]) if numbers else None
                if guess == task.data.secret:
                    won = True
                    break
                if turn + 1 == self.config.turns or segment.terminated:
                    break
                hint = "higher" if guess is None or guess < task.data.secret else "lower"
                segment = await interaction.turn(f"No, {hint}. Guess again.")
        trace = interaction.trace
        trace.record_reward("won", float(won), 1.0)
        trace.record_metric("success", float(won))


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    def load(self) -> list[GuessTask]:
        secrets = {"train": range(self.config.low, self.config.high + 1),
                   "val": [3, 11], "test": [7, 14]}[self.config.split]
        return [GuessTask(GuessData(
            id=f"{self.config.split}-{s}", secret=s,
            prompt=f"I picked a number from {self.config.low} to {self.config.high}. Guess it.",
            system_prompt=f"({self.config.split} game {s}) Reply with one number."),
            self.config.task) for s in secrets]


__all__ = ["GuessEnv", "GuessTaskset"]
