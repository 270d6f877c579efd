"""Training with vLLM as the engine: a real `vllm serve` (the session's) behind a real swarm
server and trainer. After one trainer step the server serves policy version 1, its
logprobs equal the trainer's own recompute under the new weights, and every recorded
call carries the version of the weights that produced it. A (waiting) weight sync lets a
call in flight finish on the old version before it reloads: the call is held at a known
token (tests/vllm_support.py) until the sync is seen waiting for it, so it surely is."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch

import swarmrl
from swarmrl_server.engine.base import GenerationOutput, SamplingParams
from swarmrl_server.engine.vllm.engine import VLLMEngine
from swarmrl_server.engine.vllm.server import VLLMServer
from swarmrl_server.episodes.resolve import GenerationPolicy, SamplingRequest, resolve_sampling
from swarmrl_server.errors import SwarmError
from swarmrl_server.security import IN_PROCESS
from tests.engine_fixtures import LONG_CONTEXT
from tests.helpers import assert_eventually
from tests.server_fixtures import ServerFactory
from tests.serving_support import PROMPT, collect, run
from tests.vllm_support import hold_calls

pytestmark = pytest.mark.slow
HOLD_AT = 3
"""Tokens the long call streams before it is held."""


async def restore_weights(url: str, model_dir: Path) -> None:
    """Puts the session server back on the tiny model's own weights."""
    server = VLLMServer(url)
    try:
        await server.reload_weights(model_dir, 0)
    finally:
        await server.stop()


async def test_one_trainer_step_reaches_vllm_with_its_version(
    vllm_url: str, tiny_model_dir: Path, make_server: ServerFactory
) -> None:
    from swarmrl_server.config import ModelSpec

    running = await make_server(
        models=(ModelSpec("tiny", "tiny", engine="vllm", urls=(vllm_url,)),),
        train={"batch_rule": "groups", "group_size": "2", "batch_size": "1", "lr": "1e-2",
               "progress": "false", "checkpoint_every": "0"},
    )
    host = running.swarm.models["tiny"]
    engine = host.engine
    assert isinstance(engine, VLLMEngine) and engine.max_model_len == LONG_CONTEXT  # the server's
    # No weight_sync given: "auto" resolved to vLLM's measured default, and recorded so.
    config = json.loads((running.swarm.data_dir / "trainer-config-tiny.json").read_text())
    assert config["weight_sync"] == VLLMEngine.weight_sync_default == "wait"
    try:
        async with swarmrl.AsyncSwarmClient(running.grpc_target) as client:
            before = []
            for reward in (1.0, 0.0):
                async with client.episode(task_id="t", group_id="g0") as ep:
                    await ep.generate_tokens(PROMPT, max_tokens=8, temperature=1.0, seed=int(reward))
                    await ep.reward(reward)
                    before.append(ep.id)
            await assert_eventually(lambda: _check(engine.policy_version == 1), timeout=120)
            assert await engine.servers[0].weight_version() == "1"
            async with client.episode(task_id="t", group_id="g1") as ep:
                await ep.generate_tokens(PROMPT, max_tokens=8, temperature=1.0, seed=3)
                await ep.reward(0.5)
                after = ep.id
        # Every recorded call carries the version that produced it.
        for episode_id, version in [(e, 0) for e in before] + [(after, 1)]:
            record = await running.swarm.episodes.get(episode_id, with_calls=True, caller=IN_PROCESS)
            assert record.calls and all(c.policy_version == version for c in record.calls)
        # vLLM's logprobs under version 1 == the trainer's recompute with its own weights.
        out = await run(engine, SamplingParams(temperature=0.7, max_tokens=12, seed=11))
        assert out.policy_version == 1
        model = host.trainer.group.model
        with torch.no_grad():
            logits_T_V = model(torch.tensor([PROMPT + out.completion_ids])).logits[
                0, len(PROMPT) - 1 : -1].float()
        ref_T = torch.log_softmax(logits_T_V / 0.7, -1).gather(
            1, torch.tensor(out.completion_ids)[:, None])[:, 0]
        assert torch.tensor(out.logprobs).sub(ref_T).abs().max().item() <= 1e-4
        # ...and differ from version 0's (the step changed the weights).
        base = await run_reference(tiny_model_dir, out.completion_ids)
        assert (ref_T - base).abs().max().item() > 1e-3
        sync = engine.last_sync
        assert sync is not None and sync.write_s + sync.drain_s + sync.reload_s < 30
    finally:
        await make_server.stop(running)  # before the weights go back: no step may follow
        await restore_weights(vllm_url, tiny_model_dir)


async def run_reference(model_dir: Path, completion: list[int]) -> torch.Tensor:
    from swarmrl_server.models import load_model

    model, _ = load_model(model_dir)
    with torch.no_grad():
        logits_T_V = model(torch.tensor([PROMPT + completion])).logits[0, len(PROMPT) - 1 : -1]
    return torch.log_softmax(logits_T_V.float() / 0.7, -1).gather(
        1, torch.tensor(completion)[:, None])[:, 0]


async def test_calls_in_flight_finish_on_the_old_version(
    vllm_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """A weight sync waits for the calls stamped with the old version; calls that start
    during it wait and run on the new weights, stamped with the new version."""
    from swarmrl_server.models import load_model

    engine = VLLMEngine("tiny", tiny_model_dir, urls=[vllm_url], trainable=True,
                        weights_dir=tmp_path / "weights")
    await engine.start()
    model, _ = load_model(tiny_model_dir)
    state = {k: v + 0.01 * torch.randn_like(v) for k, v in model.state_dict().items()}
    try:
        # The sync waits for calls running on the server (not for a caller slow to read: a
        # finished call's stream is read to its end by its own task). The long call is held
        # after HOLD_AT tokens (tests/vllm_support.py) until the sync is seen waiting for it.
        hold = await hold_calls(engine.servers[0], tokens=HOLD_AT)
        long = asyncio.create_task(collect(engine.generate(PROMPT, SamplingParams(
            temperature=1.0, max_tokens=60, seed=7, stop_token_ids=()))))
        await hold.wait_held()
        sync = asyncio.create_task(engine.update_weights(state, 7))
        # Once the weights are written the sync holds new calls and waits for the long one.
        await assert_eventually(lambda: _check(not engine._open.is_set() or sync.done()),
                                timeout=60)
        hold.log("sync waits")
        assert not sync.done() and engine.policy_version == 0, hold.names()
        late = asyncio.create_task(run(engine, SamplingParams(temperature=0, max_tokens=4)))
        hold.release()
        old = (await long)[-1]
        assert isinstance(old, GenerationOutput) and old.policy_version == 0
        assert old.spans() == [(0, 0, len(old.completion_ids))]
        assert len(old.completion_ids) > hold.passed  # it streamed on after the release
        await sync
        new = await late  # it waited for the sync: it runs on the new weights
        assert new.policy_version == 7 == engine.policy_version
        assert await engine.servers[0].weight_version() == "7"
        # The sync's drain covered the held call: it lasted from before the test saw the
        # sync waiting until after the call ended, and the reload began only then.
        hold.assert_order("held", "sync waits", "released", "ended", "POST /pause")
        assert engine.last_sync is not None
        assert engine.last_sync.drain_s >= hold.at("ended") - hold.at("sync waits") > 0
        # Trainable models refuse top_p < 1: vLLM's logprobs would be the nucleus's.
        with pytest.raises(SwarmError) as err:  # refused by resolve, before the engine
            resolve_sampling(SamplingRequest(temperature=1.0, top_p=0.9), GenerationPolicy(),
                             engine, trainable=True)
        assert err.value.field == "sampling.top_p"
    finally:
        await engine.stop()
        await restore_weights(vllm_url, tiny_model_dir)


def _check(condition: bool) -> None:
    assert condition
