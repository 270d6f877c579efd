"""The replica router over real in-process HF engines: sticky episodes, least-loaded new
episodes, a failed replica's call turns into a retryable UNAVAILABLE and its episodes
move, and weights reach every replica (a returning one first) before the version moves.

The only stand-in is `Killable`, a wrapper that makes a real engine fail the way a dead
Ray actor does (`ReplicaDied`); tests/server/scale/test_scale_ray.py kills real Ray actors.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from swarmrl_server.engine.base import Engine, GenerationOutput, SamplingParams
from swarmrl_server.engine.hf.engine import HFEngine
from swarmrl_server.errors import Code, Reason, SwarmError
from swarmrl_server.scale.router import ReplicaDied, Router


class Killable(Engine):
    def __init__(self, engine: HFEngine) -> None:
        self.engine = engine
        self.name, self.max_model_len = engine.name, engine.max_model_len
        self.vocab_size, self.eos_token_ids = engine.vocab_size, engine.eos_token_ids
        self.tokenizer = engine.tokenizer
        self.dead = False

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    async def start(self) -> None:
        await self.engine.start()

    async def stop(self) -> None:
        await self.engine.stop()

    async def generate(  # type: ignore[override]
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncIterator[Any]:
        async for item in self.engine.generate(prompt_ids, params):
            if self.dead:
                raise ReplicaDied("killed")
            yield item

    async def update_weights(self, state: Mapping[str, torch.Tensor], version: int, *,
                             interrupt: bool = False) -> None:
        if self.dead:
            raise ReplicaDied("killed")
        await self.engine.update_weights(state, version, interrupt=interrupt)

    async def ping(self) -> int:
        if self.dead:
            raise ReplicaDied("killed")
        return 1


async def until(check: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def _call(router: Router, key: str, max_tokens: int = 4) -> GenerationOutput:
    out = None
    async for item in router.generate([1, 873, 198], SamplingParams(
            max_tokens=max_tokens, seed=1, affinity_key=key)):
        out = item
    assert isinstance(out, GenerationOutput)
    return out


async def test_router_sticky_least_loaded_failover_and_weights(tiny_model_dir: Path) -> None:
    replicas = [Killable(HFEngine.from_pretrained("tiny", tiny_model_dir)) for _ in range(2)]
    router = Router("tiny", replicas, health_interval_s=0.05)
    await router.start()
    try:
        await _call(router, "a")
        await _call(router, "b")
        assert {router.replica_of("a"), router.replica_of("b")} == {0, 1}  # spread out
        home = router.replica_of("a")
        for _ in range(3):
            await _call(router, "a")
            assert router.replica_of("a") == home  # sticky
        # A busy replica gets no new episodes: hold one call open on replica of "b".
        busy = router.replica_of("b")
        slow = asyncio.create_task(_call(router, "b", max_tokens=200))
        await until(lambda: router._inflight[busy] == 1)
        await _call(router, "c")
        assert router.replica_of("c") != busy
        await slow

        state = {k: v.clone() for k, v in replicas[0].engine.model.state_dict().items()}
        await router.update_weights(state, 1)
        assert router.policy_version == 1 and [r.policy_version for r in replicas] == [1, 1]

        # Replica `home` dies mid-call: UNAVAILABLE (retryable), counted, episode moves.
        victim = replicas[home]
        task = asyncio.create_task(_call(router, "a", max_tokens=200))
        await until(lambda: router._inflight[home] == 1)
        victim.dead = True
        with pytest.raises(SwarmError) as err:
            await task
        assert err.value.code is Code.UNAVAILABLE
        assert err.value.reason is Reason.REPLICA_UNAVAILABLE and err.value.retry_after_s
        assert router.deaths == 1 and router.up[home] is False
        await _call(router, "a")
        assert router.replica_of("a") == 1 - home  # the episode moved
        # New weights while it is down reach the live replica; the version moves.
        await router.update_weights(state, 2)
        assert router.policy_version == 2 and victim.policy_version == 1
        # It comes back ("restarted"): readmitted only with the latest weights.
        victim.dead = False
        await until(lambda: router.up[home], timeout=5)
        assert victim.policy_version == 2 and router.restarts == 1
    finally:
        await router.stop()


def test_ray_flags_parse_and_replicas_need_ray(tmp_path: Path) -> None:
    from swarmrl_server.app import start_server
    from swarmrl_server.cli import build_parser, config_from_args
    from swarmrl_server.config import ServerConfig

    config = config_from_args(build_parser().parse_args(
        ["--ray-address", "10.0.0.1:6379", "--replicas", "2"]))
    assert config.ray and config.ray_address == "10.0.0.1:6379" and config.replicas == 2
    assert not config_from_args(build_parser().parse_args([])).ray
    with pytest.raises(ValueError, match="needs --ray"):
        asyncio.run(start_server(ServerConfig(replicas=2, port=0, http_port=None)))
