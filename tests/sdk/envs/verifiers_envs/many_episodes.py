"""Plays GROUPS groups of a verifiers env through one harness (one `serving()`), then says
so on stdout and holds every connection open until stdin closes, so the caller can count
the server's connections. Runs in .venv-verifiers: python many_episodes.py TARGET ENV ..."""

import argparse
import asyncio
import json
import sys

from verifiers.v1.clients import Client

import swarmrl
from swarmrl.envs import Runner, RunnerConfig, load_environment


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("target")
    p.add_argument("env")
    p.add_argument("--groups", type=int, default=50)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--env-args", default="{}", help="the environment's arguments, as JSON")
    args = p.parse_args()
    env = load_environment(args.env, json.loads(args.env_args))
    config = RunnerConfig(group_size=args.group_size, concurrency=args.concurrency,
                          sampling=swarmrl.SamplingParams(temperature=1.0, max_tokens=4),
                          progress=False, retries=0)
    async with swarmrl.AsyncSwarmClient(args.target) as client:
        async with Runner(env, client, config) as runner:
            report = await runner.train(groups=args.groups)
            route = env.describe()["route"]
            # What verifiers' interception holds now (its internals, read for the test).
            interception = env.env._interception
            servers = getattr(interception, "servers", [interception])
            held = {"servers": len(servers),
                    "upstream_clients": sum(len(s.clients) for s in servers),
                    "close_callbacks": sum(
                        isinstance(getattr(getattr(cb, "__wrapped__", None), "__self__", None),
                                   Client) for s in servers for _, cb in s.stack._exit_callbacks)}
            print(json.dumps({"ready": True, "route": route, **held, **report.as_dict()}),
                  flush=True)
            await asyncio.to_thread(sys.stdin.read)


asyncio.run(main())
