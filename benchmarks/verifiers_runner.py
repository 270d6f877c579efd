"""The swarmrl runner's cost per rollout against verifiers driving the same server itself.

One verifiers env (default: ``vf_guess`` from tests/sdk/envs/verifiers_envs, three model calls a
rollout, the env playing the user), the same number of episodes and concurrency, two ways:

- **runner**: ``swarmrl.envs.Runner.train`` through `swarmrl.envs.verifiers`: a swarmrl
  episode per rollout (StartEpisode, EndEpisode with the reward, over gRPC), GRPO groups,
  the adapter's checks, its client config per episode;
- **verifiers**: ``Env.run_episode`` called directly, as an eval loop would, with a
  semaphore for the concurrency; each rollout still needs a swarmrl episode (the server
  records every call in one), so it starts one, points verifiers' own client config at
  the episode's URL (``/k/<key>/v1``) and ends it with the trace's reward: no runner, no
  adapter, no groups.

Both run in one process, inside one ``Env.serving()`` each, with the same in-process chat
harness, against one ``swarmrl serve --engine echo`` (no model time, so the overhead is
not hidden); repeated and interleaved, medians reported. Run it with the verifiers venv:

    .venv-verifiers/bin/python benchmarks/verifiers_runner.py --episodes 200 --concurrency 8
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "sdk" / "envs" / "verifiers_envs"))
os.environ["PYTHONPATH"] = os.pathsep.join(  # the toolset subprocesses import the envs too
    [str(REPO / "tests" / "sdk" / "envs" / "verifiers_envs"), os.environ.get("PYTHONPATH", "")])

import swarmrl  # noqa: E402
from swarmrl.envs import Runner, RunnerConfig, load_environment  # noqa: E402
from swarmrl.envs import verifiers as adapter  # noqa: E402
from swarmrl.envs._verifiers_chat import ROUTE, RolloutRoute  # noqa: E402

SAMPLING = swarmrl.SamplingParams(temperature=1.0, max_tokens=8)


def start_server(python: str, cache_dir: str, data_dir: str, log: Path) -> subprocess.Popen[bytes]:
    cmd = [python, "-m", "swarmrl_server.cli", "--model", "tiny", "--engine", "echo",
           "--port", "0", "--http-port", "0", "--data-dir", data_dir, "--cache-dir", cache_dir]
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                env={**os.environ, "HF_HUB_OFFLINE": "1",
                                     "PYTHONPATH": f"{REPO / 'sdk_python'}:{REPO / 'server'}"})


def wait_target(proc: subprocess.Popen[bytes], log: Path) -> str:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = re.search(r"serving gRPC on (\S+)", log.read_text(errors="replace"))
        if found and "OpenAI-compatible HTTP" in log.read_text(errors="replace"):
            return found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise SystemExit(f"the server did not start:\n{log.read_text()[-3000:]}")


def in_process(env_id: str) -> dict[str, Any]:
    """The adapter's arguments for the in-process chat harness: every role pinned to
    verifiers' null harness, played in process, in the local subprocess runtime."""
    roles = load_environment(f"verifiers:{env_id}", {"sandbox": "local"}).describe()["harnesses"]
    return {"sandbox": "local", "harness": "inprocess",
            **{f"{role}.harness": {"id": "null"} for role in roles}}


async def runner_arm(target: str, env_id: str, episodes: int, group: int, concurrency: int
                     ) -> float:
    env = load_environment(f"verifiers:{env_id}", in_process(env_id))
    config = RunnerConfig(group_size=group, concurrency=concurrency, retries=0,
                          sampling=SAMPLING, progress=False)
    async with swarmrl.AsyncSwarmClient(target) as client:
        async with Runner(env, client, config) as runner:
            t0 = time.perf_counter()
            report = await runner.train(groups=episodes // group)
            seconds = time.perf_counter() - t0
    assert report.rollouts == episodes and report.groups_aborted == 0, report
    return seconds


async def verifiers_arm(target: str, env_id: str, episodes: int, concurrency: int) -> float:
    from verifiers.v1.clients import EvalClientConfig, ModelContext
    from verifiers.v1.types import SamplingConfig

    env: Any = load_environment(f"verifiers:{env_id}", in_process(env_id))
    tasks = [env._task(item) for item in env.items("train")]
    sampling = SamplingConfig(temperature=1.0, max_tokens=8)
    gate = asyncio.Semaphore(concurrency)
    async with swarmrl.AsyncSwarmClient(target) as client:
        await env.setup()

        async def one(i: int) -> None:
            async with gate:
                episode = await client.start_episode("bench-verifiers")
                base_url = (f"{episode.openai_base_url.removesuffix('/v1')}/k/"
                            f"{episode.openai_api_key}/v1")
                ctx = ModelContext(model=episode.models[0].name, sampling=sampling,
                                   client=EvalClientConfig(base_url=base_url,
                                                           api_key_var=adapter._NO_KEY_VAR))
                ROUTE.set(RolloutRoute(env._pool, base_url, None))
                played = await env.env.run_episode(tasks[i % len(tasks)], ctx)
                assert played.ok, played.errors
                await episode.end(played.traces[0].reward)

        try:
            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(episodes)))
            seconds = time.perf_counter() - t0
        finally:
            await env.close()
    return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", default="vf_guess", help="a package in tests/sdk/envs/verifiers_envs")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--server-python", default=str(REPO / ".venv" / "bin" / "python"),
                   help="a python with the server installed (the main venv)")
    p.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/swarmrl"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.log"
        proc = start_server(args.server_python, args.cache_dir, f"{tmp}/data", log)
        try:
            target = wait_target(proc, log)
            times: dict[str, list[float]] = {"runner": [], "verifiers": []}
            asyncio.run(verifiers_arm(target, args.env, 8, args.concurrency))  # warm-up
            for _ in range(args.repeats):
                times["runner"].append(asyncio.run(runner_arm(
                    target, args.env, args.episodes, args.group_size, args.concurrency)))
                times["verifiers"].append(asyncio.run(verifiers_arm(
                    target, args.env, args.episodes, args.concurrency)))
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    runner, direct = (statistics.median(times[k]) for k in ("runner", "verifiers"))
    n = args.episodes
    print(f"verifiers env {args.env}: {n} episodes, concurrency {args.concurrency}, "
          f"group size {args.group_size}, echo engine, median of {args.repeats}")
    print(f"{'path':<12}{'seconds':>10}{'ms/rollout':>12}{'rollouts/s':>12}")
    for name, seconds in (("verifiers", direct), ("runner", runner)):
        print(f"{name:<12}{seconds:>10.2f}{1000 * seconds / n:>12.1f}{n / seconds:>12.1f}")
    print(f"runner / verifiers: {runner / direct:.2f}x the time per rollout "
          f"(+{1000 * (runner - direct) / n:.1f} ms a rollout)")


if __name__ == "__main__":
    main()
