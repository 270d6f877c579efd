"""Closing a rollout's client leaves the pool every rollout shares open.

`async with rollout.openai() as client:` is the OpenAI SDK's own idiom, and the SDKs'
``close`` closes their HTTP client: on the runner's shared pool (`HttpPools`) that once
closed it for every later rollout, which then all failed. Against a real server (gRPC and
the HTTP shim, tiny model): every rollout of a run closes its client, OpenAI's and
Anthropic's in turn, and every rollout is played and trained; the pool closes only when
the runner is done with it.
"""

from __future__ import annotations

from typing import Any

import swarmrl
from swarmrl.envs import Environment, Item, Outcome, Rollout, RolloutRecord, Runner, RunnerConfig
from swarmrl.envs._api import HttpPools

USER = [{"role": "user", "content": "hi"}]


class Closing(Environment):
    """Each rollout opens its own client in `async with` and closes it when done; even
    items through OpenAI's client, odd ones through Anthropic's."""

    name = "closing"

    def items(self, split: Any) -> list[Item]:
        n = {"train": 8, "val": 1, "test": 1}[split]
        base = {"train": 0, "val": 100, "test": 200}[split]
        return [Item(f"{split}-{i}", {"n": base + i}) for i in range(n)]

    async def play(self, rollout: Rollout) -> Outcome:
        if rollout.item.data["n"] % 2 == 0:
            async with rollout.openai(max_retries=0) as client:
                r = await client.chat.completions.create(model=rollout.model, messages=USER,  # type: ignore[arg-type]
                                                         max_tokens=2)
            text = r.choices[0].message.content or ""
        else:
            async with rollout.anthropic(max_retries=0) as ac:
                m = await ac.messages.create(model=rollout.model, messages=USER,  # type: ignore[arg-type]
                                             max_tokens=2)
            text = "".join(getattr(b, "text", "") for b in m.content)
        return Outcome(reward=float(len(text) % 2))


async def test_a_closed_rollout_client_leaves_the_next_rollouts_working(
        http_server: Any) -> None:
    records: list[RolloutRecord] = []
    config = RunnerConfig(group_size=2, concurrency=2, retries=0, progress=False,
                          sampling=swarmrl.SamplingParams(max_tokens=2))
    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        async with Runner(Closing(), client, config, on_record=records.append) as runner:
            report = await runner.train(groups=4)
    assert report.rollouts == 8 and len(records) == 8
    assert all(r.trained for r in records), [r for r in records if not r.trained]
    async with swarmrl.AsyncSwarmClient(http_server.grpc_target) as client:
        infos = [await client.get_episode(r.episode_id) for r in records]
    assert all(i.num_calls == 1 for i in infos)  # every rollout's call was served


async def test_the_pool_outlives_its_clients_and_closes_with_the_pools() -> None:
    import anthropic
    import openai

    pools = HttpPools(2, 30.0)
    pool = pools.get(openai.DefaultAsyncHttpxClient)
    async with openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="k",
                                  http_client=pool) as oai:
        assert oai.is_closed() is False
    await oai.close()
    async with pool:  # a harness's own `async with` on the HTTP client: no close either
        pass
    assert not pool.is_closed and pools.get(openai.DefaultAsyncHttpxClient) is pool
    ant = pools.get(anthropic.DefaultAsyncHttpxClient)
    await anthropic.AsyncAnthropic(base_url="http://127.0.0.1:9", api_key="k",
                                   http_client=ant).close()
    assert not ant.is_closed
    await pools.aclose()  # the runner's own close, once every rollout is done
    assert pool.is_closed and ant.is_closed
