"""`swarmrl serve` whose store blocks between two models' queue writes, for crash tests.

    python -m tests.crash_server MARKER [serve options...]

Ending an episode of several models creates MARKER once the first model is queued and
then blocks inside the open transaction, so the test can SIGKILL the server exactly
between the two writes of the real code path (tests/server/store/test_multimodel_commit.py).
"""

from __future__ import annotations

import functools
import sys
import threading
from pathlib import Path

from swarmrl_server import cli, swarm
from swarmrl_server.store.sqlite import SqliteStore


def main(marker: Path, argv: list[str]) -> int:
    def block_after_first(episode_id: str, model: str, index: int) -> None:
        if index == 0:
            marker.touch()
            threading.Event().wait()  # until the SIGKILL

    # The seam is the store's constructor parameter; the swarm builds its store by this name.
    swarm.SqliteStore = functools.partial(SqliteStore, on_model_queued=block_after_first)  # type: ignore[misc]
    cli.main(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
