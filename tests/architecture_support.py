"""The project's import graph, for the tests that read the architecture from it
(tests/server/test_architecture.py: the server's layers; tests/server/trainer/test_trainer_layers.py: the
trainer's)."""

from __future__ import annotations

from functools import cache

import grimp


@cache
def graph() -> grimp.ImportGraph:
    """grimp's graph of every import in the project's packages (lazy imports too), built
    once per process."""
    return grimp.build_graph("swarmrl", "swarmrl_server", "swarmrl_proto", cache_dir=None)
