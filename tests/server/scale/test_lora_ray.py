"""LoRA with `swarmrl serve --ray`: 2 hf engine replicas (Ray actors), each holding the base
and the model's adapter; after a trainer step the router has pushed the new adapter
version to both, and each serves it with the trainer's logprobs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

import swarmrl
from swarmrl_server.engine.base import SamplingParams
from tests.helpers import assert_eventually
from tests.server_fixtures import ServerFactory
from tests.serving_support import PROMPT, recompute

pytestmark = pytest.mark.slow


async def test_the_router_pushes_each_adapter_version_to_every_replica(
    make_server: ServerFactory,
) -> None:
    ray = pytest.importorskip("ray")
    from swarmrl_server.config import ModelSpec
    from swarmrl_server.engine.base import GenerationOutput
    from swarmrl_server.scale.replicas import RayReplica
    from swarmrl_server.scale.router import Router

    running = await make_server(
        models=(ModelSpec("tiny", "tiny", "hf"),), torch_threads=1, ray=True, replicas=2,
        train={"lora_rank": "8", "batch_size": "1", "batch_rule": "groups",
               "group_size": "2", "lr": "5e-2", "checkpoint_every": "0",
               "progress": "false", "checkpoint_on_stop": "false"})
    try:
        host = running.swarm.models["tiny"]
        router = host.engine
        assert isinstance(router, Router) and len(router.replicas) == 2
        async with swarmrl.AsyncSwarmClient(running.grpc_target) as client:
            for reward in (1.0, 0.0):
                async with client.episode(task_id="t", group_id="g") as ep:
                    await ep.generate_tokens(PROMPT, max_tokens=8, temperature=1.0,
                                             seed=int(reward))
                    await ep.reward(reward)
        await assert_eventually(lambda: _check(router.policy_version == 1), timeout=120)
        reps = [r for r in router.replicas if isinstance(r, RayReplica)]
        infos = await asyncio.gather(*(r.actor.info.remote() for r in reps))
        assert [int(i["policy_version"]) for i in infos] == [1, 1]

        model: Any = host.trainer.group.model
        model.eval()
        served = set()
        for key in (f"k{i}" for i in range(20)):  # until both replicas answered
            params = SamplingParams(temperature=0.7, max_tokens=8, seed=5, affinity_key=key)
            out = None
            async for item in router.generate(PROMPT, params):
                out = item
            assert isinstance(out, GenerationOutput) and out.policy_version == 1
            lp = torch.tensor(out.logprobs)
            assert (lp - recompute(model, out.completion_ids, 0.7)).abs().max() <= 1e-4
            served.add(router.replica_of(key))
            if len(served) == 2:
                break
        assert served == {0, 1}
    finally:
        await make_server.stop(running)
        ray.shutdown()  # the local cluster this server started (its actor names are per pid)


def _check(condition: bool) -> None:
    assert condition
