"""`swarmrl run -- CMD` in a child process against a test's server, and what its log says
(tests/sdk/test_cli_run.py; tests/server/http/test_http_responses_agents.py runs an Agents SDK program
under it)."""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any


async def swarmrl_run(server: Any, *args: str) -> tuple[int, str]:
    """Runs `python -m swarmrl._run --target SERVER ARGS...`; its exit code and its log."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "swarmrl._run", "--target", server.grpc_target, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, err.decode() + out.decode()


def episode_ids(log: str) -> list[str]:
    """The episodes a run's log says it started, in order."""
    return re.findall(r"episode (ep-[0-9a-f]+) started", log)
