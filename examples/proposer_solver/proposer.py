"""The proposer client: runs the game's episodes with the swarmrl SDK.

Each episode lists both models. The proposer model writes the clue of a question
(SDK call, recorded under "proposer"); the question goes to the solver client
through a spool folder, with the episode's OpenAI URL and key, so the solver's
call is recorded in the same episode under "solver". Then this program scores
both and ends the episode with one reward per model: the server queues it for
both trainers in one transaction, and each trains only its own model's call.

Episodes are played in groups of `--group-size` (same hidden fruit, one group id)
so the trainers compare them with each other (GRPO). One JSON line per episode
goes to `--out`. Edit `AGENT_VERSION` when you change this file: the server
records it with every episode and splits its metrics by it.

    python -m examples.proposer_solver.proposer --target 127.0.0.1:50051 --spool SPOOL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import swarmrl
from examples.fruit_quiz.task import FRUITS
from examples.proposer_solver import game

AGENT_VERSION = "proposer/1"


async def ask_solver(spool: Path, ep: swarmrl.AsyncEpisode, color: str,
                     timeout: float = 120.0) -> str:
    """Hands the question to the solver program and waits for its answer."""
    name = f"{ep.id}.json"
    job = {"base_url": ep.openai_base_url, "api_key": ep.openai_api_key,
           "messages": game.solver_prompt(color)}
    tmp = spool / "jobs" / f".{name}.tmp"
    tmp.write_text(json.dumps(job))
    tmp.rename(spool / "jobs" / name)
    answer_path = spool / "answers" / name
    deadline = time.monotonic() + timeout
    while not answer_path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no answer from the solver in {timeout:g}s")
        await asyncio.sleep(0.01)
    result = json.loads(answer_path.read_text())
    answer_path.unlink()
    if "error" in result:
        raise RuntimeError(f"the solver failed: {result['error']}")
    return str(result["answer"])


async def play(client: swarmrl.AsyncSwarmClient, spool: Path, fruit: str, group_id: str,
               temperature: float) -> dict[str, Any]:
    ep = await client.start_episode(task_id=f"fruit/{fruit}", group_id=group_id,
                                    models=["proposer", "solver"])
    try:
        clue = await ep.chat(game.proposer_prompt(fruit), model="proposer", max_tokens=4,
                             temperature=temperature)
        color = game.question_color(fruit, clue.text)
        answer = await ask_solver(spool, ep, color)
    except BaseException as err:
        await ep.abort(f"game failed: {err!r}")
        raise
    p_reward = game.proposer_reward(fruit, clue.text)
    s_reward = game.solver_reward(color, answer)
    await ep.end((p_reward + s_reward) / 2,
                 model_rewards={"proposer": p_reward, "solver": s_reward})
    return {"proposer_reward": p_reward, "solver_reward": s_reward, "fruit": fruit,
            "clue": clue.text, "color": color, "answer": answer,
            "policy_version": clue.policy_version}


async def run(args: argparse.Namespace) -> None:
    spool = Path(args.spool)
    for sub in ("jobs", "answers"):  # the solver may not have started yet
        (spool / sub).mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + args.seconds
    config = swarmrl.ClientConfig(target=args.target, client_name=f"proposer-{args.seed}",
                                  agent_version=AGENT_VERSION)
    played = failures = 0
    async with swarmrl.AsyncSwarmClient(config=config) as client:
        with open(args.out, "a") as log:
            while played < args.episodes and time.monotonic() < deadline:
                # Every fruit in every round (when there are enough groups), so that each
                # training batch holds every question: no fruit's answer wins by luck.
                fruits = [FRUITS[(i + played) % len(FRUITS)] for i in range(args.groups_at_once)]
                groups = [(f, uuid.uuid4().hex) for f in fruits]
                results = await asyncio.gather(
                    *(play(client, spool, fruit, gid, args.temperature)
                      for fruit, gid in groups for _ in range(args.group_size)),
                    return_exceptions=True)
                now = time.time()
                played += len(results)
                for r in results:
                    if isinstance(r, BaseException):
                        failures += 1
                        log.write(json.dumps({"time": now, "error": repr(r)}) + "\n")
                    else:
                        log.write(json.dumps(
                            {"time": now, "agent_version": AGENT_VERSION, **r}) + "\n")
                log.flush()
    print(f"{AGENT_VERSION}: {played} episodes, {failures} failed", flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="127.0.0.1:50051", help="the server's gRPC host:port")
    p.add_argument("--spool", required=True, help="folder shared with the solver client")
    p.add_argument("--episodes", type=int, default=800, help="episodes to play (whole groups)")
    p.add_argument("--seconds", type=float, default=600.0, help="start no group after this")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--groups-at-once", type=int, default=4, help="groups played concurrently")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="append one JSON line per episode here")
    asyncio.run(run(p.parse_args(argv)))


if __name__ == "__main__":
    main()
