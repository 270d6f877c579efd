"""LoRA serving on the hf engine: two models trained as adapters of one base, through the
real gRPC server and the SDK. One base engine (one copy of the weights) serves both
adapters; each model has its own trainer and policy version; after a step the served
logprobs of the new adapter version equal the trainer's recompute, and every recorded
call carries the version of the adapter that produced it."""

from __future__ import annotations

import pytest
import torch

import swarmrl
from swarmrl_server.app import RunningServer
from swarmrl_server.config import ModelSpec
from swarmrl_server.engine.adapter import AdapterEngine
from swarmrl_server.engine.base import SamplingParams
from swarmrl_server.engine.hf.engine import HFEngine
from tests.helpers import assert_eventually
from tests.server_fixtures import ServerFactory
from tests.serving_support import PROMPT, recompute, run
from tests.store_support import stored_episode

TRAIN = {"lora_rank": "8", "lora_alpha": "16", "batch_rule": "groups", "group_size": "2",
         "batch_size": "1", "lr": "5e-2", "progress": "false", "checkpoint_every": "0",
         "checkpoint_on_stop": "false", "kl_coef": "0.01"}


@pytest.fixture
async def two_adapters(make_server: ServerFactory) -> RunningServer:
    return await make_server(
        models=(ModelSpec("a", "tiny", engine="hf"), ModelSpec("b", "tiny", engine="hf")),
        train=TRAIN)


async def test_two_adapters_on_one_hf_base_train_and_serve_independently(
    two_adapters: RunningServer,
) -> None:
    swarm = two_adapters.swarm
    a, b = swarm.models["a"], swarm.models["b"]
    assert isinstance(a.engine, AdapterEngine) and isinstance(b.engine, AdapterEngine)
    assert a.engine.base is b.engine.base and isinstance(a.engine.base, HFEngine)
    # The KL reference is the trainer's own model with the adapter off, not a copy.
    assert a.trainer.group.runner.ref_model is a.trainer.group.model

    async with swarmrl.AsyncSwarmClient(two_adapters.grpc_target) as client:
        before = []
        for reward in (1.0, 0.0):
            async with client.episode(task_id="t", group_id="g0", models=["a", "b"]) as ep:
                await ep.generate_tokens(PROMPT, model="a", max_tokens=8, temperature=1.0,
                                         seed=int(reward))
                await ep.reward(reward)
                before.append(ep.id)
        await assert_eventually(lambda: _check(a.engine.policy_version == 1), timeout=120)
        async with client.episode(task_id="t", group_id="g1", models=["a", "b"]) as ep:
            await ep.generate_tokens(PROMPT, model="a", max_tokens=8, temperature=1.0, seed=3)
            await ep.generate_tokens(PROMPT, model="b", max_tokens=8, temperature=1.0, seed=3)
            await ep.reward(0.5)
            after = ep.id
    # Independent versions: a trained once, b never.
    assert (a.engine.policy_version, b.engine.policy_version) == (1, 0)
    assert a.trainer.policy_version == 1 and b.trainer.policy_version == 0
    for episode_id, versions in [(e, {"a": 0}) for e in before] + [(after, {"a": 1, "b": 0})]:
        record = await stored_episode(two_adapters, episode_id)
        assert {c.model: c.policy_version for c in record.calls} == versions
    # The push moved the adapter alone.
    assert 0 < a.engine.last_sync_bytes < 0.05 * sum(
        p.numel() * 4 for p in a.engine.base.model.get_base_model().parameters())

    # a's served logprobs (version 1) equal its trainer's recompute; b's still the base's.
    sampling = SamplingParams(temperature=0.7, max_tokens=12, seed=11)
    out_a = await run(a.engine, sampling)  # type: ignore[arg-type]
    out_b = await run(b.engine, sampling)  # type: ignore[arg-type]
    assert (out_a.policy_version, out_b.policy_version) == (1, 0)
    trainer_a = a.trainer.group.model
    trainer_a.eval()
    served_a = torch.tensor(out_a.logprobs)
    assert (served_a - recompute(trainer_a, out_a.completion_ids, 0.7)).abs().max() <= 1e-4
    with trainer_a.disable_adapter():
        base_on_a = recompute(trainer_a, out_a.completion_ids, 0.7)
        base_on_b = recompute(trainer_a, out_b.completion_ids, 0.7)
    assert (served_a - base_on_a).abs().max() > 1e-3  # the step changed a's adapter
    assert (torch.tensor(out_b.logprobs) - base_on_b).abs().max() <= 1e-4


def _check(condition: bool) -> None:
    assert condition
