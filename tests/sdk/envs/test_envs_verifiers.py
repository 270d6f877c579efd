"""verifiers environments trained unchanged through `swarmrl.envs.verifiers`.

verifiers lives in its own venv (``make verifiers-venv``): these tests start a real swarm
server on the tiny model from this venv and run verifiers' side (``swarmrl train
verifiers:ID``) in ``.venv-verifiers/bin/python``, on the packages in
``tests/sdk/envs/verifiers_envs`` (single-turn, multi-turn with the env playing the user, tools
over MCP, verifiers' bash harness), which know nothing of swarmrl. They play verifiers'
own harness (``bash``, its default: a ``uv`` script per turn, in the subprocess runtime
that ``sandbox=local`` asks for). What they prove, from the server's store:

- every model call a rollout made lands in its own episode and nowhere else (the store's
  calls, per episode and in total, equal the verifiers traces' calls);
- a trained episode's reward is the trace's ``Trace.reward``;
- a multi-turn rollout is one timeline without forks (`merge_calls`, the trainer's merge);
- evaluation episodes are aborted and never consumed; a trainer step consumes trained ones;
- the bash harness is kept: its ``bash`` tool is in every call the model got; the same
  taskset in its remote runtime, or its code-executing harness on this host, is refused
  without ``sandbox=local``;
- 200 episodes through one harness leave at most the runner's concurrency in open
  connections to the server;
- verifiers internals the adapter relies on fail loudly when they are not where 0.4.0
  has them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO, ServerProcess, free_port, wait_until
from tests.store_support import stored_episodes, trained_episode_ids

VF_PYTHON = REPO / ".venv-verifiers" / "bin" / "python"
ENVS = REPO / "tests" / "sdk" / "envs" / "verifiers_envs"

TRAIN_OPTIONS = {"batch_rule": "groups", "group_size": "2", "batch_size": "1",
                 "checkpoint_every": "0", "checkpoint_on_stop": "false", "progress": "false"}

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _verifiers_venv() -> None:
    if VF_PYTHON.exists():
        return
    message = "the verifiers venv is missing: run `make verifiers-venv`"
    if os.environ.get("SWARMRL_REQUIRE_STUB_TOOLCHAINS") == "1":  # under `make test`
        pytest.fail(message)
    pytest.skip(message)


def _vf_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ENVS), "HF_HUB_OFFLINE": "1",
            "PYTHONUNBUFFERED": "1", **extra}


def _vf_script(script: str, **env: str) -> dict[str, Any]:
    """Runs `script` in the verifiers venv; its last stdout line, as JSON."""
    done = subprocess.run([str(VF_PYTHON), "-c", script], cwd=REPO, env=_vf_env(**env),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _server(tmp_path: Path, model_cache: Path, *extra: str) -> ServerProcess:
    return ServerProcess(data_dir=tmp_path / "data", cache_dir=model_cache,
                         http_port=free_port(), extra=["--model", "tiny", *extra]).start()


def _swarmrl_train(target: str, env: str, out: Path, *extra: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(VF_PYTHON), "-m", "swarmrl", "train", f"verifiers:{env}", "--target", target,
         "--groups", "2", "--group-size", "2", "--concurrency", "4", "--max-tokens", "6",
         "--eval-limit", "2", "--retries", "0", "--no-progress", "--out", str(out), *extra],
        cwd=REPO, env=_vf_env(), capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]


def test_three_verifiers_envs_train_unchanged(tmp_path: Path, model_cache: Path) -> None:
    from swarmrl_server.store.records import EpisodeState
    from swarmrl_server.timelines.merge import merge_calls

    server = _server(tmp_path, model_cache, "--train",
                     *[a for k, v in TRAIN_OPTIONS.items() for a in ("--train-option", f"{k}={v}")])
    try:
        runs = {env: _swarmrl_train(server.target, env, tmp_path / env,
                                    "--env-arg", "sandbox=local")
                for env in ("vf_arith", "vf_guess", "vf_tools")}
        wait_until(lambda: (tmp_path / "data" / "metrics.jsonl").exists()
                   and (tmp_path / "data" / "metrics.jsonl").read_text().strip() != "",
                   120, "a trainer step")
    finally:
        server.stop()
    store = stored_episodes(tmp_path / "data")
    records = [r for rs in runs.values() for r in rs]
    assert all(r["error"] == "" for r in records), [r["error"] for r in records if r["error"]]
    trained = {r["episode_id"] for r in records if r["trained"]}
    evals = {r["episode_id"] for r in records if r["split"] == "val"}
    tests = {r["episode_id"] for r in records if r["split"] == "test"}
    assert len(trained) == 3 * 2 * 2 and len(evals) == 3 * 2 * 2  # val before and after
    assert tests and not tests & trained  # test once, at the end, never trained

    # Every call in exactly one episode: per episode, and no call anywhere else.
    for r in records:
        episode = store[r["episode_id"]]
        assert episode.num_calls == len(episode.calls) == r["info"]["calls"], r
        assert r["info"]["untrained_calls"] == 0
    assert sum(len(e.calls) for e in store.values()) == sum(r["info"]["calls"] for r in records)
    assert set(store) == {r["episode_id"] for r in records}

    # Trained episodes ended with the trace's reward; evaluation aborted.
    for r in records:
        episode = store[r["episode_id"]]
        if r["trained"]:
            assert episode.state is EpisodeState.ENDED and episode.reward == r["reward"]
            assert r["reward"] == r["metrics"].get("reward/correct", r["metrics"].get("reward/won"))
        else:
            assert episode.state is EpisodeState.ABORTED and r["split"] in ("val", "test")

    # Multi-turn: the env played the user for up to three turns, one timeline, no fork.
    guess = [store[r["episode_id"]] for r in runs["vf_guess"]]
    assert max(len(e.calls) for e in guess) == 3
    for episode in guess:
        stats = merge_calls(episode.calls)[1]
        assert (stats.timelines, stats.forks) == (1, 0), episode.episode_id
    # The toolset's tool reached the model (named by verifiers' MCP client: server_tool),
    # beside the bash harness's own tools.
    assert all(r["info"]["tools"] == ["add_toolset_add", "bash", "edit"]
               for r in runs["vf_tools"])
    assert all(r["info"]["tools"] == ["bash", "edit"] for r in runs["vf_arith"])

    consumed = trained_episode_ids(tmp_path / "data")
    assert consumed and consumed <= trained and not consumed & (evals | tests)


@pytest.mark.parametrize(("harness", "groups"), [("inprocess", 50), ("keep", 8)])
def test_many_episodes_keep_connections_bounded(tmp_path: Path, model_cache: Path,
                                                harness: str, groups: int) -> None:
    """In process (one client config: the shared URL + the episode header), and with
    verifiers' own harness (a base URL per episode, whose upstream client the adapter
    closes after each rollout)."""
    import psutil

    env_args: dict[str, Any] = {"sandbox": "local", "harness": harness}
    if harness == "inprocess":
        env_args["agent.harness"] = {"id": "null"}
    server = _server(tmp_path, model_cache, "--engine", "echo")
    proc = None
    try:
        proc = subprocess.Popen(
            [str(VF_PYTHON), str(ENVS / "many_episodes.py"), server.target, "verifiers:vf_arith",
             "--groups", str(groups), "--group-size", "4", "--concurrency", "4",
             "--env-args", json.dumps(env_args)],
            cwd=REPO, env=_vf_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read()[-3000:] if proc.stderr else ""
        report = json.loads(line)
        assert report["rollouts"] == 4 * groups and report["groups"] == groups
        assert report["route"] == ("header" if harness == "inprocess" else "url")
        # Nothing held per episode in verifiers' interception: upstream clients (and their
        # close callbacks) number the client configs (one, or none once each is dropped).
        assert report["upstream_clients"] <= 1, report
        assert report["close_callbacks"] == report["upstream_clients"], report
        assert server.proc is not None
        open_ = [c for c in psutil.Process(server.proc.pid).net_connections("tcp")
                 if c.laddr.port == server.http_port and c.status == psutil.CONN_ESTABLISHED]
        assert len(open_) <= 4, f"{len(open_)} connections held open after {4 * groups} episodes"
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        server.stop()


def test_a_bash_harness_taskset_trains_with_its_bash_tool(tmp_path: Path,
                                                          model_cache: Path) -> None:
    """verifiers' default harness, kept: every call the model got offered its bash tool,
    in the local sandbox the run asked for (``sandbox=local``)."""
    server = _server(tmp_path, model_cache, "--train",
                     *[a for k, v in TRAIN_OPTIONS.items() for a in ("--train-option", f"{k}={v}")])
    try:
        records = _swarmrl_train(server.target, "vf_bash", tmp_path / "run",
                                 "--env-arg", "sandbox=local")
        wait_until(lambda: (tmp_path / "data" / "metrics.jsonl").exists()
                   and (tmp_path / "data" / "metrics.jsonl").read_text().strip() != "",
                   120, "a trainer step")
    finally:
        server.stop()
    assert all(r["error"] == "" for r in records), [r["error"] for r in records if r["error"]]
    store = stored_episodes(tmp_path / "data")
    trained = {r["episode_id"] for r in records if r["trained"]}
    assert len(trained) == 2 * 2
    for r in records:
        calls = store[r["episode_id"]].calls
        assert calls and len(calls) == r["info"]["calls"]
        for call in calls:
            offered = [t["function"]["name"] for t in json.loads(call.chat_json)["tools"]]
            assert offered == ["bash", "edit"], offered
    described = json.loads((tmp_path / "run" / "card.json").read_text())["env"]["describe"]
    assert described["harnesses"] == {"agent": "bash"} and described["sandbox"] == "local"
    consumed = trained_episode_ids(tmp_path / "data")
    assert consumed and consumed <= trained


@pytest.mark.parametrize(("env", "harness"), [("vf_bash", "keep"), ("vf_tools", "inprocess")])
def test_a_tool_call_cut_by_the_token_limit_ends_the_rollout_as_truncated(
        tmp_path: Path, model_cache: Path, env: str, harness: str) -> None:
    """Every call forced (``tool_choice=required``, a sampling key verifiers passes
    through) and cut by ``--max-tokens 6``: verifiers' chat program would send the cut
    call back, and the server would refuse it (400), failing every rollout. The
    adapter's stop ends each rollout at the cut instead: scored by the task, trained.
    Through verifiers' bash harness (a program per turn), and through the in-process
    chat program (``harness=inprocess``, in place of null) with the toolset's tool."""
    server = _server(tmp_path, model_cache, "--train",
                     *[a for k, v in TRAIN_OPTIONS.items() for a in ("--train-option", f"{k}={v}")])
    extra = ["--env-arg", "harness=inprocess", "--env-arg", 'agent.harness={"id": "null"}'] \
        if harness == "inprocess" else []
    try:
        records = _swarmrl_train(server.target, env, tmp_path / "run",
                                 "--env-arg", "sandbox=local",
                                 "--env-arg", "agent.sampling.tool_choice=required", *extra)
    finally:
        server.stop()
    assert all(r["error"] == "" for r in records), [r["error"] for r in records if r["error"]]
    assert "arguments must be a JSON object" not in server.log_path.read_text()
    store = stored_episodes(tmp_path / "data")
    for r in records:
        assert r["info"]["stop_condition"] == "swarmrl_cut_tool_call", r["info"]
        assert r["info"]["truncated"] and r["metrics"]["truncated"] == 1.0
        calls = store[r["episode_id"]].calls
        assert len(calls) == r["info"]["calls"] == 1 and calls[0].finish_reason == "length"
        assert r["reward"] == r["metrics"]["reward/correct"]  # the task scored the trace
    trained = [r for r in records if r["trained"]]
    assert len(trained) == 2 * 2


def test_a_sandboxed_harness_is_not_moved_to_the_host_unasked(tmp_path: Path) -> None:
    """The bash taskset as written (verifiers' default runtime: a remote prime sandbox,
    with no credentials here) is refused, naming ``sandbox=local``; so is its bash
    harness put in the subprocess runtime (on this host) without that flag."""
    script = r"""
import json
from swarmrl.envs import load_environment
out = {}
for name, args in (("remote", {}), ("host", {"agent.runtime": {"type": "subprocess"}}),
                   ("local", {"sandbox": "local"})):
    try:
        env = load_environment("verifiers:vf_bash", args)
        config = env.describe()["config"]["agent"]
        out[name] = {"harness": config["harness"], "runtime": config["runtime"]["type"]}
    except ValueError as err:
        out[name] = str(err)
print(json.dumps(out))
"""
    out = _vf_script(script, PRIME_API_KEY="", HOME=str(tmp_path))
    assert "remote prime sandbox" in out["remote"] and "sandbox=local" in out["remote"]
    assert "executes the model's code" in out["host"] and "sandbox=local" in out["host"]
    assert out["local"]["runtime"] == "subprocess"
    assert out["local"]["harness"] is None  # unpinned: verifiers' default (bash), kept


def test_a_missing_verifiers_internal_fails_loudly() -> None:
    """The in-process harness's chat program and the interception server's client cache
    are verifiers internals; another shape of either raises instead of quietly changing
    what runs (or leaking a connection per episode). So does another verifiers version."""
    script = r"""
import asyncio, json
from types import SimpleNamespace
from swarmrl.envs import load_environment
from swarmrl.envs import _verifiers_chat as chat
from swarmrl.envs._verifiers_chat import ProgramMismatch, _chat_program_source
from swarmrl.envs._versions import AdapterVersionError, check_version
from swarmrl.envs.verifiers import VerifiersInternalError
out = {}
source = _chat_program_source()
chat.program_namespace(source)  # verifiers 0.4.0's own: accepted
for name, broken in (("renamed", source.replace("def run_chat_loop(", "def chat_loop(")),
                     ("params", source.replace("config: dict[str, Any], stack: AsyncExitStack",
                                               "cfg: dict[str, Any], stack: AsyncExitStack"))):
    try:
        chat.program_namespace(broken)
    except ProgramMismatch as err:
        out[name] = str(err)
env = load_environment("verifiers:vf_arith", {"sandbox": "local"})
client = env._client_config(SimpleNamespace(base_url="http://127.0.0.1:9/k/x/v1"))
for name, interception in (("no_cache", object()),
                           ("missed", SimpleNamespace(servers=[SimpleNamespace(clients={})])),
                           ("unused", SimpleNamespace(servers=[SimpleNamespace(clients={})]))):
    env.env._interception = interception
    try:
        asyncio.run(env._forget_client(client, made_calls=name != "unused"))
        out[name] = "ok"
    except VerifiersInternalError as err:
        out[name] = str(err)
class Upstream:
    closed = False
    async def close(self):
        self.closed = True
async def held(callback):  # a server whose exit stack closes its client, as verifiers' does
    from contextlib import AsyncExitStack
    upstream, stack = Upstream(), AsyncExitStack()
    if callback:
        stack.push_async_callback(upstream.close)
    server = SimpleNamespace(clients={client.model_dump_json(): upstream}, stack=stack)
    env.env._interception = SimpleNamespace(servers=[server])
    try:
        await env._forget_client(client, made_calls=True)
    except VerifiersInternalError as err:
        return str(err)
    return {"closed": upstream.closed, "clients": len(server.clients),
            "callbacks": len(stack._exit_callbacks)}
out["dropped"] = asyncio.run(held(callback=True))
out["no_callback"] = asyncio.run(held(callback=False))
try:
    check_version("verifiers", "0.5.0", "test")
except AdapterVersionError as err:
    out["version"] = str(err)
print(json.dumps(out))
"""
    out = _vf_script(script)
    assert "defines no run_chat_loop" in out["renamed"]
    assert "connect_mcp takes ('cfg'" in out["params"]
    assert "no per-server client cache" in out["no_cache"]
    assert "holds no client under its config's JSON" in out["missed"]
    assert out["unused"] == "ok"  # an episode that never called the model had no client
    assert out["dropped"] == {"closed": True, "clients": 0, "callbacks": 0}
    assert "did not register its upstream client's close" in out["no_callback"]
    assert "built for verifiers 0.5.0; 0.4.0 is installed" in out["version"]


def test_loading_splits_and_refusals() -> None:
    """verifiers' side alone (no server): splits by a taskset's own split field or by
    content hash, deterministic and disjoint; untrainable roles refused without an
    endpoint; verifiers' retries forced to 0; the harness kept (verifiers' default, bash);
    remote runtimes made local only under ``sandbox=local``; the cut-call stop plugged."""
    script = r"""
import json
from swarmrl.envs import load_environment
from swarmrl.envs.verifiers import hash_split
out = {}
for spec, args in (("vf_arith", {"taskset.num_tasks": 60}), ("vf_guess", {})):
    env = load_environment("verifiers:" + spec, {**args, "sandbox": "local"})
    again = load_environment("verifiers:" + spec, {**args, "sandbox": "local"})
    splits = {s: [i.digest for i in env.items(s)] for s in ("train", "val", "test")}
    out[spec] = {"sizes": {s: len(v) for s, v in splits.items()},
                 "same": splits == {s: [i.digest for i in again.items(s)] for s in splits},
                 "disjoint": len(set().union(*map(set, splits.values())))
                             == sum(map(len, splits.values())),
                 "describe": env.describe()}
try:
    load_environment("verifiers:user-sim+vf_arith", {"sandbox": "local"})
except ValueError as err:
    out["refused"] = str(err)
env = load_environment("verifiers:user-sim+vf_arith",
                       {"untrained_base_url": "http://127.0.0.1:9/v1", "untrained_model": "m",
                        "sandbox": "local"})
out["user"] = {"base_url": env.config.user.client.base_url, "model": env.config.user.model,
               "assistant_client": env.config.assistant.client}
out["hash"] = [hash_split(str(i), 0.2, 0.3) for i in range(2000)]
print(json.dumps(out, default=str))
"""
    done = subprocess.run([str(VF_PYTHON), "-c", script], cwd=REPO, env=_vf_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    arith, guess = out["vf_arith"], out["vf_guess"]
    assert arith["same"] and arith["disjoint"] and sum(arith["sizes"].values()) == 60
    assert arith["describe"]["split"] == "hash" and min(arith["sizes"].values()) > 0
    assert guess["sizes"] == {"train": 16, "val": 2, "test": 2} and guess["disjoint"]
    assert guess["describe"]["split"] == "field:split"
    config = arith["describe"]["config"]
    assert config["retries"]["max_retries"] == 0 and config["agent"]["retries"]["max_retries"] == 0
    assert config["agent"]["harness"] is None  # unpinned: the taskset's default, kept
    assert config["agent"]["runtime"]["type"] == "subprocess"
    assert config["taskset"]["task"]["stops"]["swarmrl_cut_tool_call"]["fn"] == (
        "swarmrl.envs._verifiers_stops:swarmrl_cut_tool_call")
    assert "roles ['user'] must not be trained" in out["refused"]
    assert out["user"] == {"base_url": "http://127.0.0.1:9/v1", "model": "m",
                           "assistant_client": None}
    shares = {s: out["hash"].count(s) / 2000 for s in ("train", "val", "test")}
    assert abs(shares["test"] - 0.3) < 0.05 and abs(shares["val"] - 0.2) < 0.05


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
