"""A study-test client: plays one-call episodes until it is stopped.

Usage: python -m tests.server.study.agent --target HOST:PORT [--bias B]
Rewards are ``bias + (i % 2) / 2``, so variations of --bias rank predictably. An
episode the server lost to a restart is played again: the client stays attached
while its server is relaunched on the same port.
"""

from __future__ import annotations

import argparse
import sys

import swarmrl


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--target", required=True)
    p.add_argument("--bias", type=float, default=0.0)
    args = p.parse_args()
    config = swarmrl.ClientConfig(
        target=args.target, retry=swarmrl.RetryPolicy(initial=0.05, maximum=1.0, timeout=300))
    with swarmrl.SwarmClient(config=config) as client:
        i = 0
        while True:
            try:
                with client.episode(task_id=f"t{i % 2}") as ep:
                    ep.chat([{"role": "user", "content": f"round {i}"}], max_tokens=2)
                    ep.reward(args.bias + (i % 2) / 2)
            except swarmrl.SwarmError as err:  # the server restarted under the episode
                print(f"episode lost: {err}", file=sys.stderr, flush=True)
                continue
            i += 1


if __name__ == "__main__":
    sys.exit(main())
