"""The OpenEnv adapter (`swarmrl.envs.openenv`) on OpenEnv's own server and client.

The environments (`tests/openenv_support.py`) are written against OpenEnv's base
classes as their authors would write them, and served by OpenEnv's ``create_app``
(by the adapter for ``openenv:module:Class``, or by the test itself as a running
server for ``openenv:http://...``). Against a real swarm server on the tiny model:

- a text game trains under ``swarmrl train``: every model call is in exactly one
  episode; each episode's reward is the return the game itself paid; a multi-step
  rollout is one timeline with no fork; evaluation episodes are aborted and never
  consumed; the trainer steps;
- a tool environment's tool calls round-trip: the model's call reaches the tool with its
  arguments, and the tool's result is in the next call's prompt; the reward its
  author set on ``submit`` is the episode's reward;
- forced tool calls cut by the token limit end their rollouts as truncated, which
  train; no rollout fails on the cut call sent back (the server's 400);
- the held-out check sees seeds that reset to one problem when items carry the reset
  observation, and says loudly when it compares seeds only.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import swarmrl
from swarmrl.envs import Item, Runner, RunnerConfig, load_environment
from swarmrl.envs.openenv import Hooks, OpenEnv, Step
from tests.envs_support import train_attached
from tests.store_support import stored_episodes, trained_episode_ids

if TYPE_CHECKING:
    from tests.openenv_support import WeatherDesk


@pytest.mark.slow
def test_an_openenv_game_trains_under_swarmrl_train(tmp_path: Path, model_cache: Path) -> None:
    from swarmrl_server.timelines.merge import merge_calls

    log, out = tmp_path / "game.jsonl", tmp_path / "run"
    train_attached(out, model_cache, [
        "openenv:tests.openenv_support:WordGuess",
        "--env-arg", "env_args=" + json.dumps({"log": str(log)}), "--env-arg", "train=3",
        "--env-arg", "val=2", "--env-arg", "max_steps=6", "--env-arg", "success_at=1",
        "--groups", "3", "--group-size", "2", "--max-tokens", "4", "--temperature", "1.0"],
        train_options={"batch_size": "2", "batch_rule": "groups"})
    rows = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    train = {r["episode_id"]: r for r in rows if r["split"] == "train"}
    evals = {r["episode_id"]: r for r in rows if r["split"] in ("val", "test")}
    vals = [r for r in evals.values() if r["split"] == "val"]
    assert len(train) == 6 and all(r["trained"] for r in train.values())
    assert len(vals) == 4 and {r["item_id"] for r in vals} == {"val-1000000", "val-1000001"}
    assert {r["split"] for r in evals.values()} == {"val", "test"}  # test once, at the end

    game: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in log.read_text().splitlines():
        step = json.loads(line)
        game[step["episode_id"]].append(step)
    episodes = stored_episodes(out / "data")
    # Every model call is in exactly one episode, a rollout's; each turn is one game step.
    assert {e for e, ep in episodes.items() if ep.calls} == set(train) | set(evals)
    call_ids = [c.call_id for ep in episodes.values() for c in ep.calls]
    assert len(call_ids) == len(set(call_ids)) == sum(
        r["metrics"]["turns"] for r in rows)
    for episode_id, r in {**train, **evals}.items():
        stored, steps = episodes[episode_id], game[episode_id]
        assert len(stored.calls) == r["metrics"]["turns"] == len(steps) >= 1
        assert [s["guess"] for s in steps] == [
            c.text.strip() for c in sorted(stored.calls, key=lambda c: c.seq)]
        # The return the game paid (sum of its step rewards) is the episode's reward.
        assert r["reward"] == pytest.approx(sum(s["reward"] for s in steps))
        assert steps[-1]["done"] and r["info"]["ended_by"] == "done"
        timelines, stats = merge_calls(stored.calls)
        assert len(timelines) == 1 and stats.forks == 0
    for episode_id, r in train.items():
        assert episodes[episode_id].state.value == "ended"
        assert episodes[episode_id].reward == pytest.approx(r["reward"])
    assert any(len(episodes[e].calls) > 1 for e in train)  # multi-step rollouts
    # Evaluation is aborted and never trained; the trainer stepped on training episodes.
    assert all(episodes[e].state.value == "aborted" for e in evals)
    consumed = trained_episode_ids(out / "data")
    assert consumed and consumed <= set(train)
    assert (out / "data" / "metrics.jsonl").read_text().count("\n") >= 1


@pytest.fixture
def desk() -> type[WeatherDesk]:
    """The tool environment, its record of calls emptied. (Imported here, not at the top:
    OpenEnv and its MCP server take seconds to import, paid only where they are used.)"""
    from tests.openenv_support import WeatherDesk

    return WeatherDesk


@pytest.fixture
def desk_server(desk: type[WeatherDesk]) -> Iterator[str]:
    """WeatherDesk served as its author would run it: OpenEnv's create_app under uvicorn."""
    import uvicorn
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

    app = create_app(desk, CallToolAction, CallToolObservation, env_name="desk")
    # log_config=None: uvicorn's default dictConfig stops the "uvicorn" loggers from
    # propagating, process-wide, which later tests that read the root's lines would see.
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


async def _play(http_server: Any, env: OpenEnv, groups: int, group_size: int) -> list[Any]:
    records: list[Any] = []
    config = RunnerConfig(group_size=group_size, concurrency=4, progress=False,
                          sampling=swarmrl.SamplingParams(temperature=1.0, max_tokens=128))
    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        async with Runner(env, client, config, on_record=records.append) as runner:
            await runner.train(groups=groups)
    return records


async def test_tool_calls_reach_the_tool_and_results_come_back(
        http_server: Any, desk: type[WeatherDesk], desk_server: str) -> None:
    """A running MCP server; every turn a call of get_weather (forced: the random tiny
    model calls no tool by itself)."""
    from swarmrl_server.timelines.merge import merge_calls
    from tests.store_support import stored_calls

    env = load_environment(f"openenv:{desk_server}", {
        "max_steps": 3, "train": 2, "tool_choice": {
            "type": "function", "function": {"name": "get_weather"}}})
    assert isinstance(env, OpenEnv)
    records = await _play(http_server, env, groups=2, group_size=2)
    assert env.is_tool_env and [t["function"]["name"] for t in env.hooks.tools] == [
        "get_weather", "submit"]
    tokenizer = http_server.swarm.models["tiny"].engine.tokenizer
    for r in records:
        assert r.trained and r.metrics["tool_calls"] == r.metrics["turns"] == 3
        assert r.info["ended_by"] == "max_steps" and r.reward == 0.0
        calls = await stored_calls(http_server, r.episode_id)
        received = [c for c in desk.calls if c["episode_id"] == r.episode_id]
        assert len(calls) == len(received) == 3
        for i, (call, tool) in enumerate(zip(calls, received)):
            # The model's call (in its completion) is what the tool received...
            assert tool["tool"] == "get_weather" and tool["tool"] in call.text
            assert json.dumps(tool["arguments"]["city"]) in call.text
            # ...and the tool's result is in the next call's prompt.
            if i + 1 < len(calls):
                assert tool["result"] in tokenizer.decode(calls[i + 1].prompt_ids)
        timelines, stats = merge_calls(calls)
        assert len(timelines) == 1 and stats.forks == 0


async def test_a_tool_environments_submit_reward_is_the_episodes(
        http_server: Any, desk: type[WeatherDesk]) -> None:
    """The adapter serves the class itself; one session at a time (the class does not
    declare concurrent sessions), so a group's rollouts wait their turn."""
    env = load_environment("openenv:tests.openenv_support:WeatherDesk", {
        "max_steps": 2, "train": 3, "success_at": 1.0, "tool_choice": {
            "type": "function", "function": {"name": "submit"}}})
    assert isinstance(env, OpenEnv)
    records = await _play(http_server, env, groups=3, group_size=2)
    assert env.max_sessions == 1 and len(records) == 6
    for r in records:
        (submitted,) = [c for c in desk.calls if c["episode_id"] == r.episode_id]
        right = submitted["arguments"]["city"] == submitted["result"]
        assert r.reward == float(right) and r.success is right
        assert r.info["ended_by"] == "done" and r.metrics["turns"] == 1


async def test_an_end_tool_ends_the_rollout_and_state_gives_the_reward(
        http_server: Any, desk: type[WeatherDesk]) -> None:
    """For tool environments that set no reward on tool results: ``end_tool`` ends the
    rollout, ``reward=state:KEY`` reads the environment's state when it has."""
    env = load_environment("openenv:tests.openenv_support:WeatherDesk", {
        "max_steps": 3, "train": 1, "end_tool": "get_weather", "reward": "state:step_count",
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
    records = await _play(http_server, env, groups=1, group_size=2)
    for r in records:
        assert r.info["ended_by"] == "end_tool" and r.metrics["turns"] == 1
        assert r.reward == 1.0  # the state's step_count after one tool call


def test_default_hooks_render_observations_and_parse_replies() -> None:
    hooks = Hooks()
    hooks.tools = []
    hooks.action_schema = {"properties": {"metadata": {}, "guess": {"type": "string"}}}
    step = Step({"message": "Guess.", "hits": 2, "metadata": {}})
    assert hooks.render(step) == "Guess." and hooks.system() is None
    assert hooks.action("  apple \n", step) == {"guess": "apple"}
    hooks.action_schema = {"properties": {"x": {}, "y": {}}}
    assert hooks.render(Step({"x": 1, "y": [2]})) == '{"x": 1, "y": [2]}'
    assert hooks.render(Step({"metadata": {"task": "t"}}, metadata={"task": "t"})) == "t"
    assert hooks.action('sure: {"x": 1, "y": 2} ok', step) == {"x": 1, "y": 2}
    assert hooks.action("no json", step) == {"reply": "no json"}
    assert "JSON object" in (hooks.system() or "")
    assert hooks.tool_result(Step({"result": {"content": [{"type": "text", "text": "22"}]}})) \
        == "22"
    assert hooks.tool_result(Step({"error": {"message": "no such tool"}})) == (
        "error: no such tool")


class _Tasks(Hooks):
    def items(self, split: str) -> list[Item]:
        return [Item(f"{split}-{i}", {"seed": i, "split": split}) for i in range(2)]


def test_items_are_seed_ranges_or_the_hooks() -> None:
    env = OpenEnv("http://127.0.0.1:1", val=[5, 8], test=1)
    assert [i.data for i in env.items("val")] == [{"seed": 5}, {"seed": 6}, {"seed": 7}]
    assert [i.id for i in env.items("test")] == ["test-2000000"]
    assert len(list(env.items("train"))) == 10_000
    assert not {i.digest for i in env.items("val")} & {i.digest for i in env.items("test")}
    hooked = OpenEnv("http://127.0.0.1:1", hooks=_Tasks)
    assert [i.id for i in hooked.items("val")] == ["val-0", "val-1"]
    with pytest.raises(ValueError, match="expected sum, last or state:KEY"):
        OpenEnv("http://127.0.0.1:1", reward="mean")
    with pytest.raises(ValueError, match="not a running server"):
        OpenEnv("http://127.0.0.1:1", env_args={"log": "x"})
    with pytest.raises(TypeError, match="Hooks subclass"):
        OpenEnv("http://127.0.0.1:1", hooks="tests.openenv_support:WordGuess")
    assert OpenEnv("tests.openenv_support:WordGuess").name == "WordGuess"


@pytest.mark.slow
def test_cut_tool_calls_end_rollouts_as_truncated_and_train(tmp_path: Path,
                                                            model_cache: Path) -> None:
    """`swarmrl train` (a real process) on the tool environment served on 127.0.0.1, a
    real training server on the tiny model: every turn's call is forced
    (``tool_choice=required``) and ``--max-tokens 6`` cuts it inside its arguments.
    Sent back, the cut call would be refused (400) and its rollout failed; instead the
    rollout ends as truncated with the reward the environment gave, and trains."""
    out = tmp_path / "run"
    log = train_attached(out, model_cache, [
        "openenv:tests.openenv_support:WeatherDesk", "--env-arg", "tool_choice=required",
        "--env-arg", "max_steps=3", "--env-arg", "train=6", "--env-arg", "val=2",
        "--env-arg", "test=2", "--groups", "3", "--group-size", "2", "--max-tokens", "6",
        "--temperature", "1.0", "--retries", "0"],
        train_options={"batch_size": "2", "batch_rule": "groups"})
    rows = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert rows and all(r["error"] == "" for r in rows), [r["error"] for r in rows]
    assert "arguments must be a JSON object" not in log.read_text()
    episodes = stored_episodes(out / "data")
    cut = [r for r in rows if r["info"]["ended_by"] == "length"]
    assert cut, [r["info"] for r in rows]
    for r in cut:
        calls = sorted(episodes[r["episode_id"]].calls, key=lambda c: c.seq)
        assert r["metrics"]["truncated"] == 1.0 and r["reward"] == 0.0
        assert len(calls) == r["metrics"]["turns"] and calls[-1].finish_reason == "length"
    train = [r for r in cut if r["split"] == "train"]
    assert train and all(r["trained"] for r in train)
    for r in train:  # ended with their reward (not aborted): the trainer may use them
        assert episodes[r["episode_id"]].state.value == "ended"
    assert trained_episode_ids(out / "data") & {r["episode_id"] for r in train}


def test_held_out_items_carry_the_reset_observation() -> None:
    """Riddle's seeds 0, 4, 1_000_000 reset to one question: with ``held_out=observation``
    their items share a digest (the runner skips such train items); by seed they do not,
    and listing them says so loudly."""
    from structlog.testing import capture_logs

    env = OpenEnv("tests.openenv_support:Riddle", held_out="observation", train=8, val=2,
                  test=[2_000_001, 2_000_002])
    try:
        val = env.items("val")
        train = env.items("train")
        assert isinstance(val, list) and not isinstance(train, list)  # train: drawn lazily
        train_digests = {i.id: i.digest for i in train}
        assert val[0].digest == train_digests["train-0"] == train_digests["train-4"]
        assert val[1].digest == train_digests["train-1"] != val[0].digest
        assert "keys but no locks" in (val[0].content or "")
        assert env.describe()["held_out"] == "observation"
    finally:
        asyncio.run(env.close())
    by_seed = OpenEnv("tests.openenv_support:Riddle", train=8, val=2)
    with capture_logs() as logs:
        val = list(by_seed.items("val"))
        list(by_seed.items("train"))
    assert not {i.digest for i in val} & {i.digest for i in by_seed.items("train")}
    warned = [e for e in logs if e["event"] == "openenv_held_out_by_seed"]
    assert len(warned) == 1 and "compares seeds only" in warned[0]["detail"]
    with pytest.raises(ValueError, match="expected seed or observation"):
        OpenEnv("tests.openenv_support:Riddle", held_out="content")


def test_the_openenv_version_is_checked_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Another minor version is refused before anything runs; another patch warns."""
    from swarmrl.envs import _versions

    monkeypatch.setattr(_versions, "version", lambda name: "0.11.0")
    with pytest.raises(_versions.AdapterVersionError, match="built for openenv 0.10.0; 0.11.0"):
        OpenEnv("http://127.0.0.1:1")
    monkeypatch.setattr(_versions, "version", lambda name: "0.10.3")
    with pytest.warns(RuntimeWarning, match="tested with openenv 0.10.0; 0.10.3 is installed"):
        OpenEnv("http://127.0.0.1:1")
