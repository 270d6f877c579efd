"""The OpenAI-compatible shim's errors, driven by the official `openai` client (max_retries=0)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from structlog.testing import capture_logs

from swarmrl_server.security import IN_PROCESS
from tests.helpers import assert_eventually
from tests.http_support import aclient, start_episode
from tests.server_fixtures import ServerFactory
from tests.store_support import stored_calls

USER = [{"role": "user", "content": "Name a fruit."}]


# -- errors ---------------------------------------------------------------------------


async def test_listing_models_with_server_keys(make_server: ServerFactory) -> None:
    running = await make_server(http=True, data_dir=None, admin_keys=("adm",))
    ep = await start_episode(running)
    for key in ("adm", ep.key):  # a server key or any episode key may list
        client = openai.AsyncOpenAI(base_url=ep.base_url, api_key=key, max_retries=0)
        assert [m.id for m in (await client.models.list()).data] == ["tiny"]
    client = openai.AsyncOpenAI(base_url=ep.base_url, api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await client.models.list()


async def test_bad_key_is_401(http_server: Any) -> None:
    ep = await start_episode(http_server)
    for key in ("sk-nonsense", ep.key[:-1] + ("0" if ep.key[-1] != "0" else "1")):
        client = openai.AsyncOpenAI(base_url=ep.base_url, api_key=key, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as err:
            await client.chat.completions.create(model="tiny", messages=USER, max_tokens=2)
        assert err.value.body["type"] == "authentication_error"


async def test_unknown_model_is_404_naming_model(http_server: Any) -> None:
    ep = await start_episode(http_server)
    with pytest.raises(openai.NotFoundError) as err:
        await aclient(ep).chat.completions.create(model="gpt-4o", messages=USER)
    assert err.value.body["param"] == "model"
    assert err.value.body["code"] == "MODEL_NOT_FOUND"


@pytest.mark.parametrize(("body", "param"), [
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"messages": []}, "messages"),
    ({"messages": USER, "temperature": 7}, "temperature"),
    ({"messages": USER, "max_tokens": 0}, "max_tokens"),
    ({"messages": USER, "max_tokens": 99999}, "max_tokens"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
     "messages[0].content[0].type"),
    ({"messages": USER, "presence_penalty": 0.5}, "presence_penalty"),
    ({"messages": USER, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "frobnicate"}}}}, "response_format"),
    ({"messages": USER, "top_logprobs": 2}, "top_logprobs"),
])
async def test_malformed_body_is_400_naming_the_field(
    http_server: Any, body: dict[str, Any], param: str
) -> None:
    ep = await start_episode(http_server)
    client = aclient(ep)
    with pytest.raises(openai.BadRequestError) as err:
        await client.post("/chat/completions", body={"model": "tiny", **body}, cast_to=object)
    assert err.value.body["param"] == param, err.value.body
    assert err.value.body["type"] == "invalid_request_error"


async def test_invalid_json_is_400(http_server: Any) -> None:
    ep = await start_episode(http_server)
    async with httpx.AsyncClient(base_url=ep.base_url) as h:
        r = await h.post("/chat/completions", content=b"{not json",
                         headers={"authorization": f"Bearer {ep.key}",
                                  "content-type": "application/json"})
    assert r.status_code == 400
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


async def test_unknown_fields_are_accepted_and_logged(http_server: Any) -> None:
    ep = await start_episode(http_server)
    with capture_logs() as logs:
        await aclient(ep).chat.completions.create(
            model="tiny", messages=USER, max_tokens=2, extra_body={"frobnicate": 3})
    assert any(e["event"] == "ignored_fields" and e["fields"] == ["frobnicate"] for e in logs)


async def test_ended_or_aborted_episode_is_409(http_server: Any) -> None:
    ep = await start_episode(http_server)
    await http_server.swarm.episodes.end(ep.episode_id, 1.0, "", caller=IN_PROCESS)
    with pytest.raises(openai.ConflictError):
        await aclient(ep).chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    ep2 = await start_episode(http_server)
    await http_server.swarm.episodes.abort(ep2.episode_id, "test", caller=IN_PROCESS)
    with pytest.raises(openai.ConflictError):
        await aclient(ep2).chat.completions.create(model="tiny", messages=USER, max_tokens=2,
                                                   stream=True)


async def test_oversized_body_is_413(http_server: Any) -> None:
    ep = await start_episode(http_server)
    huge = "word " * (7 * 1024 * 1024)  # ~35 MB > the 32 MiB limit
    with pytest.raises(openai.APIStatusError) as err:
        await aclient(ep).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": huge}], max_tokens=2)
    assert err.value.status_code == 413
    await aclient(ep).chat.completions.create(model="tiny", messages=USER, max_tokens=2)


async def test_paused_server_is_429_with_retry_after(http_server: Any) -> None:
    ep = await start_episode(http_server)
    http_server.swarm.episodes.policy.pause_wait_s = 0  # refused at once, not waited out
    await http_server.swarm.pause("weight sync")
    with pytest.raises(openai.RateLimitError) as err:
        await aclient(ep).chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    assert int(err.value.response.headers["retry-after"]) >= 1
    assert err.value.body["code"] == "GENERATION_PAUSED"
    await http_server.swarm.resume()
    await aclient(ep).chat.completions.create(model="tiny", messages=USER, max_tokens=2)


async def test_over_capacity_is_429_with_retry_after(http_server: Any) -> None:
    ep = await start_episode(http_server)
    http_server.swarm.episodes.policy.max_inflight = 1
    client = aclient(ep)
    stream = await client.chat.completions.create(
        model="tiny", messages=USER, max_tokens=1500, stream=True)
    await anext(aiter(stream))  # one generation is running
    with pytest.raises(openai.RateLimitError) as err:
        await client.chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    assert int(err.value.response.headers["retry-after"]) >= 1
    assert err.value.body["code"] == "OVER_CAPACITY"
    await stream.close()

    async def admitted() -> None:
        await client.chat.completions.create(model="tiny", messages=USER, max_tokens=2)

    await assert_eventually(lambda: _admitted_or_raise(admitted), timeout=10)


async def _admitted_or_raise(call: Any) -> None:
    try:
        await call()
    except openai.RateLimitError as err:  # the closed stream's slot is not free yet
        raise AssertionError("still over capacity") from err


async def test_mid_stream_failure_is_an_sse_error_event_then_done(http_server: Any) -> None:
    ep = await start_episode(http_server)
    engine = http_server.swarm.models["tiny"].engine
    body = {"model": "tiny", "messages": USER, "max_tokens": 1500, "stream": True,
            "temperature": 1.0}
    async with httpx.AsyncClient(base_url=ep.base_url, timeout=60) as h, h.stream(
        "POST", "/chat/completions", json=body, headers={"authorization": f"Bearer {ep.key}"}
    ) as r:
        assert r.status_code == 200
        lines = []
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                lines.append(line[6:])
                if len(lines) == 2:
                    await engine.stop()  # the engine goes away mid-generation
    assert lines[-1] == "[DONE]"
    error = json.loads(lines[-2])["error"]
    assert error["code"] == "SHUTTING_DOWN" and error["message"]
    assert await stored_calls(http_server, ep.episode_id) == []  # nothing half recorded


async def test_client_disconnect_mid_stream_cancels_and_records_nothing(
    http_server: Any,
) -> None:
    ep = await start_episode(http_server)
    engine = http_server.swarm.models["tiny"].engine
    client = aclient(ep)
    stream = await client.chat.completions.create(
        model="tiny", messages=USER, max_tokens=1500, temperature=1.0, stream=True)
    async for _ in stream:
        break
    await stream.close()  # the client goes away after the first chunk

    def idle() -> None:
        stats = engine.stats
        assert stats.active_rows == 0 and stats.waiting == 0

    await assert_eventually(idle, timeout=20)
    assert await stored_calls(http_server, ep.episode_id) == []
    # The episode is still usable and consistent afterwards.
    await client.chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    assert len(await stored_calls(http_server, ep.episode_id)) == 1


async def test_client_disconnect_on_unary_request_cancels_it(http_server: Any) -> None:
    engine = http_server.swarm.models["tiny"].engine
    # The tiny model may sample its end of turn within the 0.5 s (an HTTP client cannot
    # turn that off): then the call is over, not cut, and a new episode tries again.
    for _ in range(3):
        ep = await start_episode(http_server)
        client = aclient(ep, timeout=0.5)
        try:
            await client.chat.completions.create(model="tiny", messages=USER, max_tokens=1800,
                                                 temperature=1.0)
        except openai.APITimeoutError:
            break
    else:
        pytest.fail("every call ended within the client's 0.5 s timeout")

    def idle() -> None:
        stats = engine.stats
        assert stats.active_rows == 0 and stats.waiting == 0

    await assert_eventually(idle, timeout=20)
    assert await stored_calls(http_server, ep.episode_id) == []
