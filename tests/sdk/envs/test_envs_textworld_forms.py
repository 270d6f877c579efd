"""One TextWorld game, three forms, the same tokens.

TextWorld is written once (`examples.textworld.agent.Game`) and exported three ways: the
native swarmrl environment (`examples.textworld.env.TextWorld`: an OpenAI-client agent on
the shim), an OpenEnv environment (`examples.textworld.openenv_env`: OpenEnv's server,
the adapter's SDK calls) and a verifiers environment (`examples/textworld/vf_textworld`:
verifiers' episode code and interception server, in ``.venv-verifiers`` as a subprocess).
Played greedily on the same game against one swarm server, the three record the same
prompt and completion ids call for call, and earn the same reward and success.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import swarmrl
from swarmrl.envs import Runner, RunnerConfig
from tests.helpers import REPO

VF_PYTHON = REPO / ".venv-verifiers" / "bin" / "python"

GREEDY = {"temperature": 0.0, "max_tokens": 12}

_VERIFIERS_SIDE = r"""
import asyncio, json, sys
import swarmrl
from swarmrl.envs import Runner, RunnerConfig, load_environment

target, args, sampling = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
env = load_environment("verifiers:vf_textworld", args)
sys.stdin.readline()  # loaded while the other forms play; plays once they are done

async def main():
    config = RunnerConfig(progress=False, eval_sampling=swarmrl.SamplingParams(**sampling))
    async with swarmrl.AsyncSwarmClient(target) as client:
        async with Runner(env, client, config) as runner:
            (record,) = (await runner.evaluate("val")).records
    (item,) = env.items("val")
    print(json.dumps({"record": record.as_dict(), "digest": item.data["digest"]}))

asyncio.run(main())
"""


async def _start_verifiers(target: str, game: dict[str, Any]) -> asyncio.subprocess.Process:
    """The verifiers form in its own venv (`swarmrl.envs.verifiers`), started early: it
    loads (seconds of imports) while the other forms play, and plays when told to
    (`_verifiers`), so the games are still played one after another."""
    args = {f"taskset.{k}": v for k, v in game.items()}
    env = {**os.environ, "PYTHONPATH": str(REPO / "examples" / "textworld"),
           "PYTHONUNBUFFERED": "1"}
    return await asyncio.create_subprocess_exec(
        str(VF_PYTHON), "-c", _VERIFIERS_SIDE, target, json.dumps(args), json.dumps(GREEDY),
        cwd=REPO, env=env, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def _verifiers(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    """Tells the started verifiers form to play, and returns what it played."""
    try:
        out, err = await asyncio.wait_for(proc.communicate(b"play\n"), timeout=240)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()[-3000:]
    return json.loads(out.decode().strip().splitlines()[-1])  # type: ignore[no-any-return]


def _no_verifiers_venv() -> None:
    message = "the verifiers venv is missing: run `make verifiers-venv`"
    if os.environ.get("SWARMRL_REQUIRE_STUB_TOOLCHAINS") == "1":  # under `make test`
        pytest.fail(message)
    pytest.skip(message)


@pytest.mark.slow
async def test_textworld_plays_alike_natively_through_openenv_and_verifiers(
        http_server: Any, textworld_games: Path) -> None:
    """The same TextWorld game, greedy: native, OpenEnv and verifiers forms record the same
    tokens, call for call, and earn the same reward and success. (Without the verifiers
    venv, native and OpenEnv are still compared before the test skips.)"""
    from examples.textworld.env import TextWorld
    from examples.textworld.openenv_env import TextWorldOpenEnv
    from tests.store_support import stored_calls

    # One game a split: the runner checks the splits apart by content, so it compiles all
    # three (with the default counts, 104 games the test never plays).
    game = {"level": 1, "train_games": 1, "val_games": 1, "test_games": 1, "max_steps": 3,
            "games_dir": str(textworld_games)}
    config = RunnerConfig(progress=False, eval_sampling=swarmrl.SamplingParams(**GREEDY))
    played = {}
    (native_game,) = TextWorld(**game).items("val")  # compiled here, before any form loads it
    vf_proc = await _start_verifiers(http_server.grpc_target, game) if VF_PYTHON.exists() else None
    try:
        async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
            for form, env in (("native", TextWorld(**game)), ("openenv", TextWorldOpenEnv(**game))):
                async with Runner(env, client, config) as runner:
                    (record,) = (await runner.evaluate("val")).records
                played[form] = (record.as_dict(), await stored_calls(http_server,
                                                                      record.episode_id))
        native, native_calls = played["native"]

        def same_as_native(form: str) -> None:
            record, calls = played[form]
            assert record["error"] == "", (form, record["error"])
            assert record["item_id"] == native["item_id"], form
            # One call per game step, as many as the native agent made.
            assert len(calls) == len(native_calls) == native["metrics"]["steps"] >= 2, form
            for a, b in zip(native_calls, calls):
                assert a.prompt_ids == b.prompt_ids, form
                assert a.completion_ids == b.completion_ids, form
            assert record["reward"] == pytest.approx(native["reward"]), form
            assert record["success"] == native["success"], form

        same_as_native("openenv")
        if vf_proc is None:
            _no_verifiers_venv()
            return
        vf = await _verifiers(vf_proc)
        assert vf["digest"] == native_game.content  # the very game file the native form played
        played["verifiers"] = (vf["record"], await stored_calls(http_server,
                                                                vf["record"]["episode_id"]))
        assert vf["record"]["metrics"]["steps"] == native["metrics"]["steps"]
        same_as_native("verifiers")
    finally:  # a failure before it played leaves it waiting on its stdin
        if vf_proc is not None and vf_proc.returncode is None:
            vf_proc.kill()
            await vf_proc.wait()


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v"]))
