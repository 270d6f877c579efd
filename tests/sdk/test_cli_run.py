"""`swarmrl run -- CMD`: an unmodified agent process plays episodes through the shim."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from swarmrl_server.security import IN_PROCESS
from tests.cli_support import episode_ids, swarmrl_run
from tests.store_support import stored_episode

pytestmark = pytest.mark.slow  # each test starts Python processes (wrapper + agent)

AGENT = """\
import os, sys
import openai

client = openai.OpenAI(max_retries=0)  # OPENAI_BASE_URL / OPENAI_API_KEY from the wrapper
reply = client.chat.completions.create(
    model=os.environ["SWARMRL_MODEL"], max_tokens=3,
    messages=[{"role": "user", "content": "What is 2+3?"}],
)
MODE = sys.argv[1]
if MODE == "fail":  # episode 0 crashes, episode 1 exits cleanly but reports no reward
    MODE = ["crash", "none"][int(os.environ["SWARMRL_EPISODE_INDEX"])]
if MODE == "file":
    with open(os.environ["SWARMRL_REWARD_FILE"], "w") as f:
        f.write("0.75")
elif MODE == "exit3":
    sys.exit(3)
elif MODE == "crash":
    raise RuntimeError("agent bug")
"""

ANTHROPIC_AGENT = """\
import os
import anthropic


client = anthropic.Anthropic(max_retries=0)  # ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY
client.messages.create(model=os.environ["SWARMRL_MODEL"], max_tokens=3,
                       messages=[{"role": "user", "content": "Hi"}])
"""


def agent(tmp_path: Path, source: str = AGENT) -> str:
    path = tmp_path / "agent.py"
    path.write_text(textwrap.dedent(source))
    return str(path)


async def test_reward_file_ends_each_episode(http_server: Any, tmp_path: Path) -> None:
    code, log = await swarmrl_run(http_server, "--task-id", "add", "--episodes", "2",
                                  "--", sys.executable, agent(tmp_path), "file")
    assert code == 0, log
    ids = episode_ids(log)
    assert len(ids) == 2
    for episode_id in ids:
        record = await stored_episode(http_server, episode_id)
        assert record.state.value == "ended" and record.reward == 0.75
        assert record.task_id == "add" and len(record.calls) == 1


async def test_reward_from_exit_code(http_server: Any, tmp_path: Path) -> None:
    code, log = await swarmrl_run(http_server, "--reward-from-exit-code",
                                  "--", sys.executable, agent(tmp_path), "exit3")
    assert code == 0, log
    (episode_id,) = episode_ids(log)
    record = await http_server.swarm.episodes.get(episode_id, caller=IN_PROCESS)
    assert record.state.value == "ended" and record.reward == 0.0


async def test_crashing_or_rewardless_agent_aborts_its_episode(
    http_server: Any, tmp_path: Path
) -> None:
    code, log = await swarmrl_run(http_server, "--episodes", "2",
                                  "--", sys.executable, agent(tmp_path), "fail")
    assert code == 1, log
    crashed, rewardless = episode_ids(log)
    record = await stored_episode(http_server, crashed)
    assert record.state.value == "aborted" and "exit status 1" in record.abort_reason
    assert len(record.calls) == 1  # kept for inspection, never trained
    record = await http_server.swarm.episodes.get(rewardless, caller=IN_PROCESS)
    assert record.state.value == "aborted" and "wrote no reward" in record.abort_reason


async def test_reward_cmd_with_an_anthropic_agent(http_server: Any, tmp_path: Path) -> None:
    score = f"{sys.executable} -c \"import os; print('noise'); print(0.5)\""
    code, log = await swarmrl_run(http_server, "--reward-cmd", score,
                                  "--", sys.executable, agent(tmp_path, ANTHROPIC_AGENT))
    assert code == 0, log
    (episode_id,) = episode_ids(log)
    record = await stored_episode(http_server, episode_id)
    assert record.reward == 0.5 and len(record.calls) == 1


async def test_reward_cmd_with_per_model_rewards(http_server: Any, tmp_path: Path) -> None:
    score = f"{sys.executable} -c \"print('{{\\\"reward\\\": 0.5, \\\"model_rewards\\\": {{\\\"tiny\\\": 0.9}}}}')\""
    code, log = await swarmrl_run(http_server, "--reward-cmd", score,
                                  "--", sys.executable, agent(tmp_path), "none")
    assert code == 0, log
    (episode_id,) = episode_ids(log)
    record = await http_server.swarm.episodes.get(episode_id, caller=IN_PROCESS)
    assert record.reward == 0.5 and record.model_rewards == {"tiny": 0.9}
    assert "tiny: 0.9" in log
