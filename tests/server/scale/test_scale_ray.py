"""`swarmrl serve --ray` on a local Ray cluster: 2 HF engine replicas behind the router and
2 FSDP2 trainer workers (gloo), all real Ray actors, driven by the real SDK over gRPC.

Three rounds of 4 two-turn episodes train three steps. Checked: every episode's calls
stay on one replica; after each step every replica's engine serves the trainer's new
policy version; in round two a replica is killed (ray.kill, Ray restarts it) while calls
run on it: the client sees no error (at most a retried call each), no ended episode is
lost (every one is consumed by a step), the death is counted, and the restarted replica
comes back serving the current version.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog

import swarmrl
from tests.helpers import wait_for_step
from tests.server_fixtures import ServerFactory

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "Count with me."}]


async def until(check: Any, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_ray_replicas_and_fsdp2_workers_train(make_server: ServerFactory) -> None:
    ray = pytest.importorskip("ray")
    from swarmrl_server.config import ModelSpec
    from swarmrl_server.scale.replicas import RayReplica
    from swarmrl_server.scale.router import Router

    running = await make_server(
        models=(ModelSpec("tiny", "tiny", "hf"),), torch_threads=1, ray=True, replicas=2,
        train={"batch_size": "4", "group_size": "2", "workers": "2", "worker_cpus": "1",
               "checkpoint_every": "0", "progress": "false", "checkpoint_on_stop": "false",
               "max_staleness": "100", "lr": "1e-3", "packing": "true"},
    )
    try:
        host = running.swarm.models["tiny"]
        router = host.engine
        trainer = host.trainer
        assert isinstance(router, Router) and len(router.replicas) == 2
        assert trainer.group is not None and len(trainer.group.workers) == 2
        homes: dict[str, set[int]] = {}
        ended: list[str] = []

        async def play(client: swarmrl.AsyncSwarmClient, i: int, tokens: int) -> None:
            async with client.episode(task_id=f"t{i // 2}", group_id=f"g{i // 2}") as ep:
                messages = list(MESSAGES)
                for _turn in range(2):
                    reply = await ep.chat(messages, max_tokens=tokens, temperature=1.0)
                    homes.setdefault(ep.id, set()).add(router.replica_of(ep.id))  # type: ignore[arg-type]
                    messages += [reply.message, {"role": "user", "content": "Again."}]
                await ep.reward(float(i % 2))
                ended.append(ep.id)

        async def served_versions() -> list[int]:
            """The versions the replicas' engines themselves report (in their actors)."""
            reps = [r for r in router.replicas if isinstance(r, RayReplica)]
            infos = await asyncio.gather(*(r.actor.info.remote() for r in reps))
            return [int(info["policy_version"]) for info in infos]

        with structlog.testing.capture_logs() as logs:
            async with swarmrl.AsyncSwarmClient(running.grpc_target) as client:
                for step in (1, 2, 3):
                    games = [asyncio.create_task(play(client, 4 * step + i, 16))
                             for i in range(4)]
                    if step == 2:  # kill a replica while it generates
                        await until(lambda: router._inflight[0] > 0)
                        ray.kill(router.replicas[0].actor, no_restart=False)
                    await asyncio.gather(*games)
                    await wait_for_step(trainer, step, timeout=120)
                    if step == 2:
                        await until(lambda: all(router.up), timeout=90)
                    assert await served_versions() == [trainer.policy_version] * 2
                    assert router.policy_version == trainer.policy_version == step
        retries = [e for e in logs if e.get("event") == "retrying"]
        assert router.deaths == 1 and router.restarts == 1
        # Each call that was on the dead replica was retried once, and nothing else was.
        assert retries and all(e["method"] == "Generate" and e["attempt"] == 1 for e in retries)
        moved = [e for e, reps in homes.items() if len(reps) > 1]
        assert len(retries) <= 4 and len(moved) <= len(retries)
        assert all(len(reps) == 1 for e, reps in homes.items() if e not in moved)
        assert len(set().union(*homes.values())) == 2  # both replicas served episodes
        consumed = await running.swarm.store.consumed_episodes("tiny")
        assert len(ended) == 12 and set(ended) <= set(consumed)
        # A sharded checkpoint: the workers' DCP shards next to servable HF weights.
        path = await trainer.save_checkpoint()
        assert path.name == "step-3" and (path / "sharded" / "sharded_meta.json").is_file()
        assert (path / "model.safetensors").is_file() and (path / "trainer_state.json").is_file()
    finally:
        await make_server.stop(running)  # before Ray goes: its replicas and workers are actors
        ray.shutdown()
