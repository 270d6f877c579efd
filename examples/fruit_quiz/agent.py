"""A fruit-quiz agent: plays groups of episodes against a swarm server with the SDK.

Each group is `--group-size` episodes of the same first question, played
concurrently and sharing a group id, so the trainer compares them with each
other (GRPO). Every finished episode is appended to `--out` as one JSON line
(time, reward, question, policy versions), which the demo turns into its curve.

    python -m examples.fruit_quiz.agent --target 127.0.0.1:50051 --episodes 800 --seconds 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
import uuid
from pathlib import Path
from typing import Any

import swarmrl
from examples.fruit_quiz.task import COLORS, FruitQuiz


async def play(
    client: swarmrl.AsyncSwarmClient, quiz: FruitQuiz, group_id: str, *,
    temperature: float, max_tokens: int,
) -> dict[str, Any]:
    """Plays one episode to the end; returns what the demo logs about it."""
    versions: list[int] = []
    async with client.episode(task_id=quiz.task_id, group_id=group_id,
                              agent_version="fruit-quiz/1") as ep:
        while not quiz.done:
            completion = await ep.chat(quiz.messages, max_tokens=max_tokens,
                                       temperature=temperature)
            versions.append(completion.policy_version)
            quiz.answer(completion.message)
        await ep.reward(quiz.reward)
    return {"reward": quiz.reward, "color": quiz.color, "policy_versions": versions,
            "answers": [m["content"] for m in quiz.messages if m["role"] == "assistant"]}


async def run(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    deadline = time.monotonic() + args.seconds
    out = Path(args.out) if args.out else None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
    failures = played = 0
    config = swarmrl.ClientConfig(target=args.target, client_name=f"fruit-quiz-{args.seed}")
    async with swarmrl.AsyncSwarmClient(config=config) as client:
        with open(out, "a") if out is not None else open("/dev/null", "w") as log:
            while time.monotonic() < deadline and not (args.episodes and played >= args.episodes):
                color = rng.choice(COLORS)
                group_id = uuid.uuid4().hex
                results = await asyncio.gather(
                    *(play(client, FruitQuiz(color, rng=random.Random(rng.random())), group_id,
                           temperature=args.temperature,
                           max_tokens=args.max_tokens) for _ in range(args.group_size)),
                    return_exceptions=True,
                )
                now = time.time()
                played += len(results)
                for r in results:
                    if isinstance(r, BaseException):
                        # Failures are data: counted and shown, never silently retried into
                        # a half-filled group.
                        failures += 1
                        log.write(json.dumps({"time": now, "error": repr(r)}) + "\n")
                    else:
                        log.write(json.dumps({"time": now, "group_id": group_id, **r}) + "\n")
                log.flush()
    if failures:
        print(f"fruit-quiz agent {args.seed}: {failures} episodes failed", flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="127.0.0.1:50051", help="the server's gRPC host:port")
    p.add_argument("--episodes", type=int, default=0,
                   help="stop after this many episodes (whole groups; 0 = no limit)")
    p.add_argument("--seconds", type=float, default=60.0,
                   help="start no group after this many seconds")
    p.add_argument("--group-size", type=int, default=8, help="episodes per group")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="append one JSON line per episode here")
    asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
