"""The OpenAI Agents SDK with its DEFAULT model provider (`OpenAIResponsesModel`, which
speaks the Responses API) against the shim, configured only by OPENAI_BASE_URL /
OPENAI_API_KEY as `swarmrl run` sets them: the tool runs, the episode holds the calls
with the exact ids the SDK saw, and a multi-turn agent run is one timeline.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any, Literal

import pytest
from agents import (
    Agent,
    ModelSettings,
    ModelTracing,
    Runner,
    ToolCallItem,
    function_tool,
    set_tracing_disabled,
)
from agents.models import openai_provider
from agents.models.multi_provider import MultiProvider
from agents.models.openai_responses import OpenAIResponsesModel

from swarmrl_server.timelines.merge import merge_calls
from tests.cli_support import episode_ids, swarmrl_run
from tests.http_support import Ep, start_episode, tool_call_text
from tests.store_support import stored_calls, stored_episode


@pytest.fixture(autouse=True)
def _sdk_state(monkeypatch: pytest.MonkeyPatch) -> None:
    set_tracing_disabled(True)  # traces would go to api.openai.com
    # The default provider shares one httpx client per process, bound to the event loop
    # that first used it; each test has its own loop (an agent process has one).
    monkeypatch.setattr(openai_provider, "_http_client", None)


def point_env_at(monkeypatch: pytest.MonkeyPatch, ep: Ep) -> None:
    """What `swarmrl run` does for an agent process."""
    monkeypatch.setenv("OPENAI_BASE_URL", ep.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", ep.key)


def weather_agent(seen: list[str]) -> Agent:
    @function_tool
    def get_weather(city: str) -> str:
        """Weather in a city."""
        seen.append(city)
        return f"mild in {city}"

    # model="tiny": a name, so the default provider picks the model class.
    return Agent(name="forecaster", instructions="Use the tool.", tools=[get_weather],
                 model="tiny", model_settings=ModelSettings(max_tokens=64))


def test_the_default_provider_speaks_the_responses_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-unused")
    assert isinstance(MultiProvider().get_model("tiny"), OpenAIResponsesModel)


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_runs_and_the_episode_has_the_exact_call_ids(
    scripted_server: Any, monkeypatch: pytest.MonkeyPatch, stream: bool,
) -> None:
    ep = await start_episode(scripted_server)
    point_env_at(monkeypatch, ep)
    scripted_server.script.replies = [tool_call_text("get_weather", {"city": "Paris"}),
                                      "Mild in Paris."]
    seen: list[str] = []
    agent = weather_agent(seen)
    if stream:
        run: Any = Runner.run_streamed(agent, "Weather in Paris?", max_turns=3)
        async for _ in run.stream_events():
            pass
    else:
        run = await Runner.run(agent, "Weather in Paris?", max_turns=3)
    assert run.final_output == "Mild in Paris." and seen == ["Paris"]
    first, second = await stored_calls(scripted_server, ep.episode_id)
    for call in (first, second):  # made through /v1/responses, not chat completions
        assert "response" in json.loads(call.chat_json)["annotations"]
    (sdk_call,) = [i.raw_item for i in run.new_items if isinstance(i, ToolCallItem)]
    (recorded,) = json.loads(first.chat_json)["reply"]["tool_calls"]
    assert sdk_call.call_id == recorded["id"]
    assert json.loads(sdk_call.arguments) == json.loads(recorded["function"]["arguments"])
    tool_msg = [m for m in json.loads(second.chat_json)["messages"] if m["role"] == "tool"]
    assert tool_msg == [{"role": "tool", "tool_call_id": recorded["id"],
                         "content": "mild in Paris"}]
    assert second.parent_call_id == first.call_id


@pytest.mark.parametrize("chaining", ["history", "previous_response_id"])
async def test_four_turn_agent_run_is_one_timeline(
    scripted_server: Any, monkeypatch: pytest.MonkeyPatch, chaining: str,
) -> None:
    ep = await start_episode(scripted_server)
    point_env_at(monkeypatch, ep)
    scripted_server.script.replies = [
        tool_call_text("get_weather", {"city": "Paris"}, before="First Paris."),
        tool_call_text("get_weather", {"city": "Oslo"}),
        tool_call_text("get_weather", {"city": "Lima"}, before="Lima too."),
        "Lima is the warmest.",
    ]
    seen: list[str] = []
    run = await Runner.run(weather_agent(seen), "Which is warmest: Paris, Oslo, Lima?",
                           max_turns=6, auto_previous_response_id=chaining != "history")
    assert run.final_output == "Lima is the warmest."
    assert seen == ["Paris", "Oslo", "Lima"]
    calls = await stored_calls(scripted_server, ep.episode_id)
    assert len(calls) == 4
    assert [json.loads(c.chat_json)["fork_reason"] for c in calls] == [""] * 4
    timelines, stats = merge_calls(calls)
    assert stats.timelines == 1 and stats.forks == 0
    assert timelines[0].call_ids == [c.call_id for c in calls]
    assert timelines[0].token_ids == calls[-1].prompt_ids + calls[-1].completion_ids


@pytest.mark.parametrize("tool_choice", ["required", "get_weather"])
async def test_forced_tool_choice_with_the_real_tiny_model(
    http_server: Any, monkeypatch: pytest.MonkeyPatch, tool_choice: str,
) -> None:
    """No script: the random model's reply is a call only because the grammar makes it one."""
    ep = await start_episode(http_server)
    point_env_at(monkeypatch, ep)
    seen: list[str] = []

    @function_tool
    def get_weather(city: Literal["Paris", "Seoul", "Lima"]) -> str:
        """Weather in a city."""
        seen.append(city)
        return f"sunny in {city}"

    agent = Agent(name="forecaster", instructions="Use the tool.", tools=[get_weather],
                  model="tiny", tool_use_behavior="stop_on_first_tool",
                  model_settings=ModelSettings(tool_choice=tool_choice, max_tokens=96))
    run = await Runner.run(agent, "Weather in Lima?", max_turns=2)
    assert len(seen) == 1 and run.final_output == f"sunny in {seen[0]}"
    (call,) = await stored_calls(http_server, ep.episode_id)
    assert call.constrained


async def test_responses_model_direct_call_reports_usage(scripted_server: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    ep = await start_episode(scripted_server)
    point_env_at(monkeypatch, ep)
    scripted_server.script.replies = ["Hello."]
    model = MultiProvider().get_model("tiny")
    r = await model.get_response(
        system_instructions=None, input="Hi", model_settings=ModelSettings(), tools=[],
        output_schema=None, handoffs=[], tracing=ModelTracing.DISABLED, previous_response_id=None,
        conversation_id=None, prompt=None)
    (call,) = await stored_calls(scripted_server, ep.episode_id)
    assert r.usage.input_tokens == len(call.prompt_ids)
    assert r.usage.output_tokens == len(call.completion_ids)


AGENT = """\
import os
from agents import Agent, ModelSettings, Runner, set_tracing_disabled

set_tracing_disabled(True)  # traces would go to api.openai.com, which is not ours
# The Agents SDK's default model (OpenAIResponsesModel) reads OPENAI_BASE_URL/OPENAI_API_KEY.
agent = Agent(name="a", model=os.environ["SWARMRL_MODEL"],
              model_settings=ModelSettings(max_tokens=16))
result = Runner.run_sync(agent, "What is 2+3?")
with open(os.environ["SWARMRL_REWARD_FILE"], "w") as f:
    f.write("1" if result.final_output == "5" else "0")
"""


@pytest.mark.slow
async def test_swarmrl_run_points_the_default_model_at_the_episode(
    scripted_server: Any, tmp_path: Path,
) -> None:
    scripted_server.script.replies = ["5"]
    path = tmp_path / "agent.py"
    path.write_text(textwrap.dedent(AGENT))
    code, log = await swarmrl_run(scripted_server, "--task-id", "add", "--", sys.executable,
                                  str(path))
    assert code == 0, log
    (episode_id,) = episode_ids(log)
    record = await stored_episode(scripted_server, episode_id)
    assert record.state.value == "ended" and record.reward == 1.0
    (call,) = record.calls
    assert "response" in json.loads(call.chat_json)["annotations"]
