"""reasoning-gym as a swarmrl environment: a task mix of one-turn problems, scored by the
datasets' own scorers.

    swarmrl train examples.reasoning_gym.env:ReasoningGym --model smollm2 --minutes 30 \\
        --temperature 0.7 --train-option batch_rule=varied_groups --train-option batch_size=3 \\
        --train-option task_mix=basic_arithmetic:1,chain_sum:1,leg_counting:1 \\
        --train-option task_mix_short=fill

An episode is one chat turn through the SDK: the question plus "Reply with the final
answer only.". The reward is the dataset's scorer (``dataset.score_answer``) applied to
the **last number of the reply**: SmolLM2 writes "5 - 3 = 2", which the exact scorer
calls wrong, and then nearly every group scores all zeros and nothing learns. Success
is a score of 1.0 (the scorer gives partial credit to near misses).

**Splits.** reasoning-gym draws problem ``i`` of a dataset with seed ``s`` from
``random.Random(s + i)``, so datasets with nearby seeds share problems (seed 2's first
problem is seed 1's second). The splits therefore take disjoint ranges of generator
seeds: test ``TEST_SEED + [0, test_size)`` (the held-out set of the earlier runs), val
``VAL_SEED`` onwards (the first ``val_size`` per task that are not test questions), and
train ``1 + TRAIN_SEED_STRIDE * seed`` onwards, in chunks of 256, without end. An item's
content is its question, so the runner also skips a training problem whose question
happens to equal a val or test question (small question spaces, like level 1's sums,
repeat questions under different seeds).

**A fresh test set**: ``test_seed=S`` (an env arg, recorded in ``describe()``) draws test
from ``S`` onwards instead, the first ``test_size`` per task whose question is neither a
val question nor one of the earlier test set's (those chose configurations before). Val
stays as it was, computed against the earlier test set, so val is the same whatever the
test seed; the default ``TEST_SEED`` gives the earlier test set itself.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import reasoning_gym

from swarmrl.envs import Environment, Item, Outcome, Rollout, Split

PROMPT = "{question}\nReply with the final answer only."
TEST_SEED = 20261203
VAL_SEED = 30261203
TRAIN_SEED_STRIDE = 10_000_000
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")

# Generator settings per task and level: level 1 is the easiest.
TASKS: dict[str, dict[int, dict[str, Any]]] = {
    "basic_arithmetic": {
        1: dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, operators=("+", "-"),
                allow_parentheses=False, allow_negation=False),
        2: dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2, operators=("+", "-"),
                allow_parentheses=False, allow_negation=False),
        3: dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2,
                allow_parentheses=False, allow_negation=False),
    },
    "chain_sum": {
        1: dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1),
        2: dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2),
        3: dict(min_terms=3, max_terms=4, min_digits=1, max_digits=2),
    },
    "leg_counting": {
        1: dict(min_animals=1, max_animals=1, min_instances=1, max_instances=2),
        2: dict(min_animals=1, max_animals=2, min_instances=1, max_instances=3),
        3: dict(min_animals=2, max_animals=3, min_instances=1, max_instances=4),
    },
}


def extract_answer(reply: str) -> str:
    """The last number in the reply (the whole reply, stripped, when it has none)."""
    numbers = NUMBER.findall(reply)
    return numbers[-1] if numbers else reply.strip()


def parse_mix(text: str) -> dict[str, int]:
    """``task:weight,...`` (a weight defaults to 1)."""
    mix = {}
    for part in text.split(","):
        task, _, weight = part.partition(":")
        if task not in TASKS:
            raise ValueError(f"mix: unknown task {task!r} (known: {', '.join(TASKS)})")
        mix[task] = int(weight or 1)
    return mix


class ReasoningGym(Environment):
    """The task mix at a level; `mix` weights the tasks in training (give the trainer the
    same ``task_mix`` so each batch holds each task's quota)."""

    name = "reasoning-gym"

    def __init__(self, level: int = 2, mix: str = "basic_arithmetic:1,chain_sum:1,leg_counting:1",
                 val_size: int = 30, test_size: int = 60, seed: int = 0,
                 max_tokens: int = 24, test_seed: int = TEST_SEED) -> None:
        if level not in (1, 2, 3):
            raise ValueError(f"level must be 1, 2 or 3, got {level}")
        self.level, self.mix = level, parse_mix(mix)
        self.sizes = {"val": val_size, "test": test_size}
        self.seed, self.max_tokens, self.test_seed = seed, max_tokens, test_seed
        self.scorers = {t: self._dataset(t, 0, 1) for t in self.mix}

    def _dataset(self, task: str, seed: int, size: int) -> Any:
        return reasoning_gym.create_dataset(task, size=size, seed=seed,
                                            **TASKS[task][self.level])

    def describe(self) -> dict[str, Any]:
        return {"level": self.level, "mix": self.mix, "sizes": self.sizes, "seed": self.seed,
                "tasks": {t: TASKS[t][self.level] for t in self.mix}, "prompt": PROMPT,
                "val_seed": VAL_SEED, "test_seed": self.test_seed, "max_tokens": self.max_tokens}

    def _item(self, task: str, seed: int, index: int, entry: dict[str, Any]) -> Item:
        return Item(f"{task}/{seed}/{index}", entry, task=task, content=entry["question"])

    def items(self, split: Split) -> list[Item] | Iterator[Item]:
        if split == "train":
            return self._train()
        earlier = self._draw(TEST_SEED, "test", set())
        if split == "test" and self.test_seed == TEST_SEED:
            return earlier
        # val leaves out questions that are also test questions (small question spaces,
        # like level 1's sums, repeat questions under different seeds).
        taken = {str(item.content) for item in earlier}
        val = self._draw(VAL_SEED, "val", taken)
        if split == "val":
            return val
        return self._draw(self.test_seed, "test", taken | {str(i.content) for i in val},
                          exact=True)

    def _draw(self, seed: int, split: str, taken: set[str], exact: bool = False) -> list[Item]:
        """Per task, the first ``sizes[split]`` problems from ``seed`` on whose question is
        not `taken` (the earlier test set as drawn before: nothing taken, no more drawn);
        `exact`: refuse a split that comes out short."""
        size, out = self.sizes[split], []
        for t in self.mix:
            drawn = self._dataset(t, seed, 4 * size if taken else size)
            fresh = [self._item(t, seed, i, e) for i, e in enumerate(drawn)
                     if e["question"] not in taken][:size]
            if exact and len(fresh) < size:
                raise ValueError(f"test_seed={seed}: only {len(fresh)} of {4 * size} {t} "
                                 f"problems are new; {size} are needed")
            out += fresh
        return out

    def _train(self) -> Iterator[Item]:
        """Endless: tasks in mix proportion, each from consecutive chunks of generator seeds
        starting at ``1 + TRAIN_SEED_STRIDE * seed``."""
        chunk = 256
        starts = {t: itertools.count(1 + TRAIN_SEED_STRIDE * self.seed, chunk) for t in self.mix}
        streams: dict[str, Iterator[Item]] = {}
        for task in itertools.cycle([t for t, w in self.mix.items() for _ in range(w)]):
            while True:
                item = next(streams[task], None) if task in streams else None
                if item is not None:
                    break
                s = next(starts[task])
                streams[task] = (self._item(task, s, i, e)
                                 for i, e in enumerate(self._dataset(task, s, chunk)))
            yield item

    async def play(self, rollout: Rollout) -> Outcome:
        entry = rollout.item.data
        c = await rollout.chat([{"role": "user", "content": PROMPT.format(**entry)}],
                               max_tokens=rollout.sampling.max_tokens or self.max_tokens)
        score = float(self.scorers[rollout.item.task].score_answer(extract_answer(c.text), entry))
        return Outcome(reward=score, success=score >= 1.0,
                       info={"reply": c.text, "answer": entry["answer"]})
