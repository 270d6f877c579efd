"""reasoning-gym: an SDK client trains a model on a mix of procedural tasks, held-out eval.

    python -m examples.reasoning_gym.run --model smollm2 --train-minutes 30 --out runs/rg
    python -m examples.reasoning_gym.run --model smollm2 --train-minutes 0 --level 2  # base rate

Tasks and difficulty (``--level``) are in `TASKS`: each is a reasoning-gym dataset
(``reasoning_gym.create_dataset``) with its own generator settings. An episode is one
chat turn: the problem's question plus "Reply with the final answer only."; the
reward is the dataset's own scorer, ``dataset.score_answer(answer, entry)`` (1.0 for
the gold answer), applied to the **last number in the reply** rather than the whole
reply: SmolLM2 tends to write "5 - 3 = 2", which the exact scorer calls wrong, and then
nearly every group is all zeros and nothing learns (the extraction is the one thing
added to the dataset's scoring).

**Split by seed.** Held-out problems come from ``EVAL_SEED``; training problems from
other seeds (``--seed`` picks which: seed s draws from dataset seeds 1 + 1000 s, ...), and any training problem whose question is also a held-out question is
skipped, so the held-out set is never trained on. Eval plays each held-out problem
once, greedily, and aborts the episode (never trained).

**Task mix.** Training groups cycle through the tasks in proportion to ``--mix``, and
the trainer's ``task_mix`` option gets the same weights, so each batch holds each
task's quota of groups (``task_mix_short=fill``: a task whose groups all scored the same
and were dropped does not stall the batch).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import reasoning_gym

import swarmrl
from examples.env_runs import Server, add_common_args, gather_limited, run_from_args, train_options

PROMPT = "{question}\nReply with the final answer only."
EVAL_SEED = 20261203
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


@dataclass
class Problems:
    """One task's held-out problems and an endless supply of training problems."""

    task: str
    level: int
    eval_size: int
    first_train_seed: int = 1
    held_out: list[dict[str, Any]] = field(init=False)
    _questions: set[str] = field(init=False)
    _train: Any = field(init=False)
    skipped: int = 0
    """Training problems skipped because their question is a held-out question."""

    def __post_init__(self) -> None:
        self.dataset = self._make(EVAL_SEED, self.eval_size)
        self.held_out = list(self.dataset)
        self._questions = {e["question"] for e in self.held_out}
        self._train = self._generate()

    def _make(self, seed: int, size: int) -> Any:
        return reasoning_gym.create_dataset(self.task, size=size, seed=seed,
                                            **TASKS[self.task][self.level])

    def _generate(self) -> Any:
        for seed in itertools.count(self.first_train_seed):
            for entry in self._make(seed, 256):
                if entry["question"] in self._questions:
                    self.skipped += 1
                else:
                    yield entry

    def next_train(self) -> dict[str, Any]:
        return next(self._train)

    def score(self, reply: str, entry: dict[str, Any]) -> float:
        return float(self.dataset.score_answer(extract_answer(reply), entry))


class ReasoningGym:
    """The `Environment` of `examples.env_runs`: groups of one-turn episodes via the SDK."""

    name = "reasoning-gym"

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.mix = parse_mix(args.mix)
        self.problems = {t: Problems(t, args.level, args.eval_size, 1 + 1000 * args.seed)
                         for t in self.mix}
        # Each round plays --parallel-groups groups, tasks drawn in mix proportion.
        self.order = itertools.cycle([t for t, w in self.mix.items() for _ in range(w)])

    async def _episode(self, client: swarmrl.AsyncSwarmClient, task: str,
                       entry: dict[str, Any], group_id: str | None, *,
                       evaluate: bool) -> dict[str, Any]:
        problems = self.problems[task]
        async with client.episode(task_id=task, group_id=group_id,
                                  agent_version="reasoning-gym/1") as ep:
            c = await ep.chat([{"role": "user", "content": PROMPT.format(**entry)}],
                              max_tokens=self.args.max_tokens,
                              temperature=0.0 if evaluate else self.args.temperature)
            reward = problems.score(c.text, entry)
            record = {"episode_id": ep.id, "task": task, "reward": reward, "reply": c.text,
                      "answer": entry["answer"], "policy_version": c.policy_version}
            if evaluate:
                await ep.abort("held-out evaluation")  # never trained on
            else:
                await ep.reward(reward)
        return record

    async def evaluate(self, server: Server) -> list[dict[str, Any]]:
        async with swarmrl.AsyncSwarmClient(server.target) as client:
            jobs = [lambda t=t, e=e: self._episode(client, t, e, None, evaluate=True)
                    for t, p in self.problems.items() for e in p.held_out]
            results = await gather_limited(self.args.concurrency, jobs)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            raise RuntimeError(f"{len(failed)} evaluation episodes failed: {failed[0]!r}")
        return [{**r, "success": r["reward"] >= 1.0} for r in results]

    async def train_round(self, server: Server, round_index: int) -> list[dict[str, Any]]:
        async with swarmrl.AsyncSwarmClient(server.target) as client:
            jobs = []
            for _ in range(self.args.parallel_groups):
                task = next(self.order)
                entry, group = self.problems[task].next_train(), uuid.uuid4().hex
                jobs += [lambda t=task, e=entry, g=group:
                         self._episode(client, t, e, g, evaluate=False)
                         for _ in range(self.args.group_size)]
            results = await gather_limited(len(jobs), jobs)
        return [r if not isinstance(r, BaseException) else {"error": repr(r)} for r in results]


def parse_mix(text: str) -> dict[str, int]:
    mix = {}
    for part in text.split(","):
        task, _, weight = part.partition(":")
        if task not in TASKS:
            raise SystemExit(f"--mix: unknown task {task!r} (known: {', '.join(TASKS)})")
        mix[task] = int(weight or 1)
    return mix


def trainer_options(args: argparse.Namespace) -> dict[str, str]:
    """Each batch holds each task's quota of groups (the trainer's task_mix); a task whose
    groups all scored the same (dropped) is filled in by the others, not waited for."""
    return train_options(args, task_mix=args.mix, task_mix_short="fill")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(p)
    p.add_argument("--level", type=int, default=2, choices=(1, 2, 3), help="difficulty (TASKS)")
    p.add_argument("--mix", default="basic_arithmetic:1,chain_sum:1,leg_counting:1",
                   help="tasks and their weights (also the trainer's task_mix)")
    p.add_argument("--eval-size", type=int, default=60, help="held-out problems per task")
    p.set_defaults(out="runs/reasoning-gym", parallel_groups=3, batch_groups=3, max_tokens=24,
                   concurrency=32)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    env = ReasoningGym(args)
    summary = run_from_args(env, args, trainer_options(args), describe={
        "level": args.level, "tasks": {t: TASKS[t][args.level] for t in env.mix},
        "mix": args.mix, "eval_seed": EVAL_SEED, "eval_size_per_task": args.eval_size})
    summary["train_skipped_held_out"] = {t: p.skipped for t, p in env.problems.items()}
    (Path(args.out) / "summary.json").write_text(json.dumps(summary, indent=1))
    return 0 if "before" in summary else 1


if __name__ == "__main__":
    raise SystemExit(main())
