"""Single-turn sums: one question, one reply, scored on the number it ends with."""

import random
import re

import verifiers.v1 as vf


class ArithData(vf.TaskData):
    answer: int


class ArithTask(vf.Task[ArithData]):
    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        numbers = re.findall(r"-?\d+", trace.last_reply)
        return float(bool(numbers) and int(numbers[-1]) == self.data.answer)

    @vf.metric
    async def success(self, trace: vf.Trace) -> float:
        return await self.correct(trace)


class ArithConfig(vf.TasksetConfig):
    num_tasks: int = 24
    seed: int = 0


class ArithTaskset(vf.Taskset[ArithTask, ArithConfig]):
    def load(self) -> list[ArithTask]:
        rng = random.Random(self.config.seed)
        tasks = []
        for i in range(self.config.num_tasks):
            a, b = rng.randint(0, 50), rng.randint(0, 50)
            tasks.append(ArithTask(ArithData(id=f"sum-{i}", prompt=f"What is {a} + {b}?",
                                             system_prompt="Reply with the number only.",
                                             answer=a + b), self.config.task))
        return tasks


__all__ = ["ArithTaskset"]
