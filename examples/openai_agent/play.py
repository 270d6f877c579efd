"""Plays groups of fruit-quiz episodes with the Agents SDK agent, via `swarmrl run`.

Each round picks a color and runs `swarmrl run --episodes GROUP_SIZE` with one task
and group id, so the trainer (GRPO) compares the group's episodes with each other.
`--parallel` rounds run at once (the server batches their calls).

    python -m examples.openai_agent.play --target 127.0.0.1:50051 --rounds 8
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

from examples.fruit_quiz.task import COLORS

REWARD = re.compile(r"ended with reward ([-0-9.e]+)")


def play_round(args: argparse.Namespace, color: str) -> list[float]:
    """One group of episodes; returns their rewards (aborted episodes have none)."""
    cmd = [sys.executable, "-m", "swarmrl._run", "--target", args.target,
           "--task-id", f"fruit-quiz/{color}", "--group-id", uuid.uuid4().hex,
           "--agent-version", "openai-agents/1", "--episodes", str(args.group_size),
           "--", sys.executable, "-m", "examples.openai_agent.agent"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode == 2:
        raise SystemExit(f"swarmrl run failed:\n{done.stderr}")
    return [float(r) for r in REWARD.findall(done.stderr)]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="127.0.0.1:50051", help="server gRPC address")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8,
                   help="episodes per group (match the trainer's group_size)")
    p.add_argument("--parallel", type=int, default=2, help="rounds played at once")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    colors = [rng.choice(COLORS) for _ in range(args.rounds)]
    with ThreadPoolExecutor(args.parallel) as pool:
        for i, (color, rewards) in enumerate(zip(colors, pool.map(
                lambda c: play_round(args, c), colors))):
            mean = sum(rewards) / len(rewards) if rewards else float("nan")
            print(f"round {i + 1}/{args.rounds} {color:>7}: {len(rewards)} episodes, "
                  f"mean reward {mean:.3f}", flush=True)


if __name__ == "__main__":
    main()
