"""A chaos-suite client process: plays episodes until killed, logging each one it ended.

Usage: python -m tests.chaos.agent TARGET LOGFILE NAME
An episode id is appended (and fsynced) only after EndEpisode returned, so every
logged id is an episode the server acknowledged as ended.
"""

from __future__ import annotations

import os
import sys

import swarmrl


def main() -> None:
    target, log_path, name = sys.argv[1:4]
    config = swarmrl.ClientConfig(
        target=target, retry=swarmrl.RetryPolicy(initial=0.05, maximum=1.0, timeout=300))
    with swarmrl.SwarmClient(config=config) as client, open(log_path, "a") as log:
        i = 0
        while True:
            with client.episode(task_id=f"{name}-{i % 4}") as ep:
                ep.chat([{"role": "user", "content": f"{name} round {i}"}], max_tokens=4)
                ep.reward(float(i % 2))
            log.write(ep.id + "\n")
            log.flush()
            os.fsync(log.fileno())
            i += 1


if __name__ == "__main__":
    main()
