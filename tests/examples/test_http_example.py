"""The framework example: an unmodified OpenAI Agents SDK agent plays rewarded episodes
through the shim, and its multi-turn episode is one token-exact timeline."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from typing import Any

import pytest

from swarmrl_server.security import IN_PROCESS
from swarmrl_server.timelines.merge import merge_calls
from tests.helpers import REPO
from tests.store_support import stored_calls

pytest.importorskip("agents", reason="the example needs openai-agents")
pytestmark = pytest.mark.slow  # starts the wrapper and the agent as processes


async def test_agents_sdk_agent_plays_rewarded_episodes(http_server: Any) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "swarmrl._run", "--target", http_server.grpc_target,
        "--task-id", "fruit-quiz/red", "--episodes", "2",
        "--", sys.executable, "-m", "examples.openai_agent.agent",
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=180)
    log = err.decode() + out.decode()
    assert proc.returncode == 0, log
    ids = re.findall(r"episode (ep-[0-9a-f]+) ended with reward", log)
    assert len(ids) == 2
    for episode_id in ids:
        record = await http_server.swarm.episodes.get(episode_id, caller=IN_PROCESS)
        assert record.state.value == "ended" and record.reward in (0.0, 0.5, 1.0)
        calls = await stored_calls(http_server, episode_id)
        assert len(calls) == 2  # two questions, one model call each
        # The SDK sends the first answer back as history: the second call extends it.
        _, stats = merge_calls(calls)
        assert stats.timelines == 1 and stats.forks == 0, [c.chat_json for c in calls]
