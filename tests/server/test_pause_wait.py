"""A call made while its model is paused waits the pause out, up to `--pause-wait`.

Harnesses that proxy model calls (verifiers' interception server, say) drop the
Retry-After of a 429, so a weight sync of a few seconds used to kill their rollouts.
Every client here is the official `openai` one with `max_retries=0` (or the SDK with
retries off): a call that succeeds across a pause was waited out by the server, not
retried by the client.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import openai
import pytest

import swarmrl
from swarmrl_server.security import IN_PROCESS
from tests.helpers import assert_eventually
from tests.http_support import aclient, start_episode
from tests.server_fixtures import ServerFactory
from tests.store_support import stored_calls

PAUSE_S = 10.0


def _check(condition: bool) -> None:
    assert condition


def _waiting(running: Any, n: int) -> None:
    assert running.swarm.pauses.waiting == n


async def test_a_turn_made_during_a_10_second_pause_waits_it_out(http_server: Any) -> None:
    swarm = http_server.swarm
    ep = await start_episode(http_server)
    client = aclient(ep)
    messages: list[Any] = [{"role": "user", "content": "Hello"}]

    async def turn() -> Any:
        reply = await client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=4, seed=1)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
        messages.append({"role": "user", "content": "And then?"})
        return reply

    first = await turn()
    await swarm.pause("weight sync")
    paused_at = time.monotonic()
    second = asyncio.create_task(turn())
    await assert_eventually(lambda: _waiting(http_server, 1))
    # Waiting holds no engine capacity: the call is not in flight until the pause lifts.
    assert swarm.episodes.inflight("tiny") == 0
    await asyncio.sleep(PAUSE_S - (time.monotonic() - paused_at))
    assert not second.done()
    await swarm.resume()
    reply = await second
    assert time.monotonic() - paused_at >= PAUSE_S
    assert swarm.pauses.waiting == 0
    third = await turn()  # the rollout goes on

    calls = await stored_calls(http_server, ep.episode_id)
    replies = [first, reply, third]
    assert [c.call_id for c in calls] == [r.swarmrl["call_ids"][0] for r in replies]  # type: ignore[attr-defined]
    for earlier, later in zip(calls, calls[1:]):  # one timeline: each turn extends the last
        assert later.prompt_ids[:len(earlier.prompt_ids) + len(earlier.completion_ids)] == \
            earlier.prompt_ids + earlier.completion_ids
    await swarm.episodes.end(ep.episode_id, 1.0, "", caller=IN_PROCESS)


async def test_a_grpc_generate_waits_too(http_server: Any) -> None:
    swarm = http_server.swarm
    config = swarmrl.ClientConfig(target=http_server.grpc_target, retry=None)
    async with swarmrl.AsyncSwarmClient(config=config) as client:
        async with client.episode(task_id="t") as ep:
            await swarm.pause("weight sync")
            chat = asyncio.create_task(ep.chat([{"role": "user", "content": "hi"}], max_tokens=2))
            await assert_eventually(lambda: _waiting(http_server, 1))
            await swarm.resume()
            assert (await chat).text is not None
            await ep.reward(1.0)
    assert swarm.pauses.waiting == 0


@pytest.fixture
async def short_wait_server(make_server: ServerFactory) -> Any:
    """A server whose calls wait at most 0.5 s for a pause to lift (`--pause-wait 0.5`)."""
    from swarmrl_server.cli import build_parser, config_from_args

    args = build_parser().parse_args(["--pause-wait", "0.5"])
    assert config_from_args(args).pause_wait_s == 0.5  # the flag reaches the config
    return await make_server(http=True, pause_wait_s=0.5)


async def test_past_the_bound_the_call_is_refused_with_429(short_wait_server: Any) -> None:
    ep = await start_episode(short_wait_server)
    await short_wait_server.swarm.pause("weight sync")
    t0 = time.monotonic()
    with pytest.raises(openai.RateLimitError) as err:
        await aclient(ep).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert time.monotonic() - t0 >= 0.5
    assert err.value.body["code"] == "GENERATION_PAUSED"  # type: ignore[index]
    assert int(err.value.response.headers["retry-after"]) >= 1
    assert short_wait_server.swarm.pauses.waiting == 0
    assert await stored_calls(short_wait_server, ep.episode_id) == []


async def test_a_client_gone_while_waiting_ends_the_wait(http_server: Any) -> None:
    swarm = http_server.swarm
    ep = await start_episode(http_server)
    await swarm.pause("weight sync")
    async with httpx.AsyncClient(base_url=ep.base_url) as h:
        request = asyncio.create_task(h.post(
            "/chat/completions", headers={"Authorization": f"Bearer {ep.key}"},
            json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                  "max_tokens": 2, "stream": True}))
        await assert_eventually(lambda: _waiting(http_server, 1))
        request.cancel()  # closes the connection
        with pytest.raises(asyncio.CancelledError):
            await request
    await assert_eventually(lambda: _waiting(http_server, 0))
    await swarm.resume()
    assert swarm.episodes.inflight("tiny") == 0
    assert await stored_calls(http_server, ep.episode_id) == []
