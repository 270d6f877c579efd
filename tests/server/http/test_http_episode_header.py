"""One base URL per run: `X-Swarmrl-Episode` names a request's episode.

Harnesses cache one HTTP client per configuration: with the episode in the base URL
(`/k/<key>/v1`) they open connections per episode, forever; and verifiers overwrites
`Authorization` with a key of its own. On the plain `/v1` URL the header names the
episode and wins over `Authorization` / `x-api-key`, so one client (one pool of
connections) plays every episode of a run. The SDK hands out the header as
`AsyncEpisode.http_headers`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import psutil
import pytest

import swarmrl
from tests.engine_fixtures import make_engine
from tests.http_support import start_episode
from tests.server_fixtures import ServerFactory
from tests.store_support import stored_calls

USER = [{"role": "user", "content": "hi"}]
EPISODES = 200
CONCURRENCY = 8


def connections_to(port: int) -> int:
    """This process's open TCP connections to the server on `port` (the client side: the
    server runs in this process too, and its side has `port` as the local port)."""
    return sum(1 for c in psutil.Process().net_connections(kind="tcp")
               if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED)


async def test_the_header_names_the_episode_whatever_authorization_says(
    http_server: Any,
) -> None:
    ep = await start_episode(http_server)
    header = {"X-Swarmrl-Episode": ep.key}
    # verifiers-style: the client's own key from an env var, the episode in the header.
    oai = openai.AsyncOpenAI(base_url=ep.base_url, api_key="sk-from-the-env", max_retries=0)
    reply = await oai.chat.completions.create(model="tiny", messages=USER, max_tokens=2,  # type: ignore[arg-type]
                                              extra_headers=header)
    assert reply.swarmrl["episode_id"] == ep.episode_id  # type: ignore[attr-defined]
    ant = anthropic.AsyncAnthropic(base_url=ep.root_url, api_key="sk-ant-from-the-env",
                                   max_retries=0)
    await ant.messages.create(model="tiny", max_tokens=2, messages=USER,  # type: ignore[arg-type]
                              extra_headers=header)
    assert len(await stored_calls(http_server, ep.episode_id)) == 2
    assert (await oai.models.list(extra_headers=header)).data

    # The header decides: a bad one is refused even with a valid key in Authorization.
    other = await start_episode(http_server)
    valid_auth = openai.AsyncOpenAI(base_url=ep.base_url, api_key=other.key, max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await valid_auth.chat.completions.create(
            model="tiny", messages=USER, max_tokens=2,  # type: ignore[arg-type]
            extra_headers={"X-Swarmrl-Episode": ep.key[:-1] + "x"})
    assert await stored_calls(http_server, other.episode_id) == []


@pytest.fixture
async def echo_server(make_server: ServerFactory, tiny_model_dir: Path) -> Any:
    """A server whose model "tiny" runs on the echo engine (instant replies)."""
    from swarmrl_server.hosting import ModelHost

    engine = await make_engine("echo", tiny_model_dir)
    hosts = {"tiny": ModelHost("tiny", engine, "tiny", tiny_model_dir)}
    return await make_server(http=True, hosts=hosts)


async def test_200_episodes_through_one_client_use_at_most_8_connections(
    echo_server: Any,
) -> None:
    port = httpx.URL(echo_server.openai_base_url).port
    assert port is not None and connections_to(port) == 0
    config = swarmrl.ClientConfig(target=echo_server.grpc_target)
    limit = asyncio.Semaphore(CONCURRENCY)
    landed: dict[str, str] = {}  # episode id -> the episode the reply says it landed in
    base_urls: set[str] = set()
    async with swarmrl.AsyncSwarmClient(config=config) as sdk:
        # One client for the whole run, with a key of its own: the header names the episode.
        shared = openai.AsyncOpenAI(base_url=echo_server.openai_base_url,
                                    api_key="sk-harness-key", max_retries=0)

        async def play(i: int) -> None:
            async with limit, sdk.episode(task_id=f"t{i}") as ep:
                base_urls.add(ep.openai_base_url)
                reply = await shared.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": f"task {i}"}],
                    max_tokens=2, extra_headers=ep.http_headers)
                landed[ep.id] = reply.swarmrl["episode_id"]  # type: ignore[attr-defined]
                await ep.reward(1.0)

        await asyncio.gather(*(play(i) for i in range(EPISODES)))
        shared_connections = connections_to(port)
        await shared.close()

        assert base_urls == {echo_server.openai_base_url}  # one stable base URL
        assert len(landed) == EPISODES and all(k == v for k, v in landed.items())
        for episode_id in landed:  # every call in its own episode, and only there
            assert len(await stored_calls(echo_server, episode_id)) == 1
        assert 1 <= shared_connections <= CONCURRENCY

        # The contrast: a client per episode at its own base URL (/k/<key>/v1) keeps a
        # connection per episode; the count grows with the episodes played.
        per_episode = []
        for i in range(2 * CONCURRENCY):
            ep = await start_episode(echo_server, task_id=f"own-{i}")
            own = openai.AsyncOpenAI(base_url=ep.base_url.replace("/v1", f"/k/{ep.key}/v1"),
                                     api_key="ignored", max_retries=0)
            await own.chat.completions.create(model="tiny", messages=USER, max_tokens=2)  # type: ignore[arg-type]
            per_episode.append(own)
        assert connections_to(port) >= 2 * CONCURRENCY > shared_connections
        for own in per_episode:
            await own.close()
