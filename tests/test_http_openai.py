"""The OpenAI-compatible shim, driven by the official `openai` client (max_retries=0)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import httpx
import openai
import pytest
from structlog.testing import capture_logs

from swarmrl_proto.v1 import episode_service_pb2 as ep_pb
from swarmrl_proto.v1 import episode_service_pb2_grpc as ep_grpc
from swarmrl_proto.v1 import session_service_pb2 as s_pb
from swarmrl_proto.v1 import session_service_pb2_grpc as s_grpc
from swarmrl_server.security import IN_PROCESS
from tests.helpers import assert_eventually
from tests.http_support import WEATHER_TOOL, Ep, start_episode, stored_calls, tool_call_text

USER = [{"role": "user", "content": "Name a fruit."}]


def aclient(ep: Ep, **kw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.key, max_retries=0, **kw)


# -- basics ---------------------------------------------------------------------------


async def test_sync_client_chat_records_the_engines_exact_ids(http_server: Any) -> None:
    ep = await start_episode(http_server)

    def run() -> Any:  # the sync client blocks: keep it off the server's event loop
        with openai.OpenAI(base_url=ep.base_url, api_key=ep.key, max_retries=0) as client:
            return client.chat.completions.create(
                model="tiny", messages=USER, max_tokens=6, seed=3,
                extra_body={"return_token_ids": True},
            )

    r = await asyncio.to_thread(run)
    (call,) = await stored_calls(http_server, ep.episode_id)
    assert r.object == "chat.completion" and r.model == "tiny"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == call.text
    assert r.prompt_token_ids == call.prompt_ids
    assert r.choices[0].token_ids == call.completion_ids
    assert r.usage.prompt_tokens == len(call.prompt_ids)
    assert r.usage.completion_tokens == len(call.completion_ids) <= 6
    assert r.swarmrl == {"episode_id": ep.episode_id, "call_ids": [call.call_id],
                         "policy_version": 0, "overridden": {}, "fork_reason": ""}


async def test_token_ids_are_opt_in(http_server: Any) -> None:
    ep = await start_episode(http_server)
    r = await aclient(ep).chat.completions.create(model="tiny", messages=USER, max_tokens=3)
    assert "prompt_token_ids" not in r.model_extra
    assert "token_ids" not in r.choices[0].model_extra


async def test_models_are_listed(http_server: Any) -> None:
    ep = await start_episode(http_server)
    client = aclient(ep)
    models = await client.models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert models.data[0].model_extra["policy_version"] == 0
    assert (await client.models.retrieve("tiny")).id == "tiny"
    with pytest.raises(openai.NotFoundError):
        await client.models.retrieve("nope")


async def test_streaming_is_token_by_token_and_reassembles_to_the_recorded_call(
    http_server: Any,
) -> None:
    ep = await start_episode(http_server)
    stream = await aclient(ep).chat.completions.create(
        model="tiny", messages=USER, max_tokens=12, seed=5, stream=True,
        stream_options={"include_usage": True}, extra_body={"return_token_ids": True},
    )
    chunks = [c async for c in stream]
    (call,) = await stored_calls(http_server, ep.episode_id)
    body = [c for c in chunks if c.choices]
    assert body[0].choices[0].delta.role == "assistant"
    ids = [t for c in body for t in c.choices[0].model_extra["token_ids"]]
    assert ids == call.completion_ids
    assert sum(1 for c in body if c.choices[0].model_extra["token_ids"]) >= 2  # real deltas
    assert "".join(c.choices[0].delta.content or "" for c in body) == call.text
    last = body[-1]
    assert last.choices[0].finish_reason in ("stop", "length")
    assert last.model_extra["prompt_token_ids"] == call.prompt_ids
    assert last.model_extra["swarmrl"]["call_ids"] == [call.call_id]
    assert chunks[-1].usage.completion_tokens == len(call.completion_ids)


async def test_stream_and_unary_agree_for_the_same_seed(http_server: Any) -> None:
    ep = await start_episode(http_server)
    client = aclient(ep)
    kw: dict[str, Any] = {"model": "tiny", "messages": USER, "max_tokens": 8, "seed": 11,
                          "temperature": 1.0, "extra_body": {"return_token_ids": True}}
    unary = await client.chat.completions.create(**kw)
    stream = await client.chat.completions.create(**kw, stream=True)
    streamed = [t async for c in stream for t in (c.choices[0].model_extra["token_ids"]
                                                  if c.choices else [])]
    assert streamed == unary.choices[0].token_ids


async def test_n_choices_are_separate_calls_with_derived_seeds(http_server: Any) -> None:
    ep = await start_episode(http_server)
    client = aclient(ep)
    kw: dict[str, Any] = {"model": "tiny", "messages": USER, "max_tokens": 6, "n": 3,
                          "seed": 21, "extra_body": {"return_token_ids": True}}
    r = await client.chat.completions.create(**kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    calls = await stored_calls(http_server, ep.episode_id)
    assert sorted(r.swarmrl["call_ids"]) == sorted(c.call_id for c in calls)
    assert len({tuple(c.token_ids) for c in r.choices}) > 1  # seed + i: choices differ
    again = await client.chat.completions.create(**kw)  # ...and are reproducible
    assert [c.token_ids for c in again.choices] == [c.token_ids for c in r.choices]
    assert r.usage.completion_tokens == sum(len(c.token_ids) for c in r.choices)
    # Streaming with n: every choice index appears and finishes once.
    stream = await client.chat.completions.create(**kw, stream=True)
    finished = [c.choices[0].index async for c in stream if c.choices[0].finish_reason]
    assert sorted(finished) == [0, 1, 2]


async def test_logprobs_line_up_with_token_ids(http_server: Any) -> None:
    ep = await start_episode(http_server)
    r = await aclient(ep).chat.completions.create(
        model="tiny", messages=USER, max_tokens=5, logprobs=True, top_logprobs=3,
        extra_body={"return_token_ids": True},
    )
    (call,) = await stored_calls(http_server, ep.episode_id)
    content = r.choices[0].logprobs.content
    assert len(content) == len(r.choices[0].token_ids)
    assert [e.logprob for e in content] == pytest.approx(call.logprobs)
    assert all(len(e.top_logprobs) == 3 for e in content)
    assert all(e.top_logprobs[0].logprob >= e.logprob - 1e-6 for e in content)


async def test_forced_temperature_is_reported_not_silent(http_server: Any) -> None:
    http_server.swarm.episodes.policy.force_temperature = 1.0
    ep = await start_episode(http_server)
    client = aclient(ep)
    r = await client.chat.completions.create(model="tiny", messages=USER, max_tokens=3,
                                             temperature=0.2)
    assert r.swarmrl["overridden"] == {"temperature": 1.0}
    (call,) = await stored_calls(http_server, ep.episode_id)
    assert call.temperature == 1.0
    stream = await client.chat.completions.create(model="tiny", messages=USER, max_tokens=3,
                                                  temperature=0.2, stream=True)
    infos = [c.model_extra.get("swarmrl") async for c in stream]
    assert [i for i in infos if i][-1]["overridden"] == {"temperature": 1.0}


async def test_idempotent_retry_with_request_id_replays_the_call(http_server: Any) -> None:
    ep = await start_episode(http_server)
    client = aclient(ep)
    kw: dict[str, Any] = {"model": "tiny", "messages": USER, "max_tokens": 4,
                          "extra_body": {"request_id": "turn-1", "return_token_ids": True}}
    first = await client.chat.completions.create(**kw)
    again = await client.chat.completions.create(**kw)
    assert again.swarmrl["call_ids"] == first.swarmrl["call_ids"]
    assert again.choices[0].token_ids == first.choices[0].token_ids
    assert len(await stored_calls(http_server, ep.episode_id)) == 1


# -- addressing -----------------------------------------------------------------------


async def test_start_episode_over_grpc_returns_a_working_base_url_and_key(
    http_server: Any,
) -> None:
    async with grpc.aio.insecure_channel(http_server.grpc_target) as channel:
        await s_grpc.SessionServiceStub(channel).OpenSession(
            s_pb.OpenSessionRequest(session_id="s-grpc", client_name="t"))
        started = await ep_grpc.EpisodeServiceStub(channel).StartEpisode(
            ep_pb.StartEpisodeRequest(session_id="s-grpc", task_id="t"))
    assert started.openai_base_url == http_server.openai_base_url
    ep = Ep(started.episode_id, started.openai_api_key, started.openai_base_url)
    await aclient(ep).chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    assert len(await stored_calls(http_server, ep.episode_id)) == 1


async def test_key_in_the_base_url_addresses_the_episode(http_server: Any) -> None:
    ep = await start_episode(http_server)
    root = ep.base_url.removesuffix("/v1")
    client = openai.AsyncOpenAI(base_url=f"{root}/k/{ep.key}/v1", api_key="ignored",
                                max_retries=0)
    await client.chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    assert len(await stored_calls(http_server, ep.episode_id)) == 1


async def test_calls_land_only_in_their_own_episode(http_server: Any) -> None:
    a, b = await start_episode(http_server), await start_episode(http_server)
    await aclient(a).chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    await aclient(b).chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    await aclient(b).chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    assert len(await stored_calls(http_server, a.episode_id)) == 1
    assert len(await stored_calls(http_server, b.episode_id)) == 2


# -- tools ----------------------------------------------------------------------------


async def test_tool_calls_round_trip_on_one_token_timeline(scripted_server: Any) -> None:
    ep = await start_episode(scripted_server)
    client = aclient(ep)
    scripted_server.script.replies = [
        tool_call_text("get_weather", {"city": "Paris"}, before="Let me check."),
        "It is sunny in Paris.",
    ]
    messages: list[Any] = [{"role": "user", "content": "Weather in Paris?"}]
    r = await client.chat.completions.create(model="tiny", messages=messages,
                                             tools=[WEATHER_TOOL], tool_choice="auto")
    msg = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls"
    assert msg.content == "Let me check."
    (tc,) = msg.tool_calls
    assert tc.type == "function" and tc.id.startswith("call_")
    assert tc.function.name == "get_weather"
    assert json.loads(tc.function.arguments) == {"city": "Paris"}
    # The template showed the model the tools (Hermes-style <tools> in the system turn).
    tokenizer = scripted_server.swarm.models["tiny"].tokenizer
    assert "<tools>" in tokenizer.decode(scripted_server.script.prompts[0])
    messages += [msg.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": tc.id, "content": '{"sky": "sunny"}'}]
    r2 = await client.chat.completions.create(model="tiny", messages=messages,
                                              tools=[WEATHER_TOOL])
    assert r2.choices[0].message.content == "It is sunny in Paris."
    assert r2.choices[0].message.tool_calls is None
    first, second = await stored_calls(scripted_server, ep.episode_id)
    assert second.parent_call_id == first.call_id
    assert second.prompt_ids[: len(first.prompt_ids) + len(first.completion_ids)] == \
        first.prompt_ids + first.completion_ids
    assert r2.swarmrl["fork_reason"] == ""


async def test_streamed_tool_call_is_one_delta_when_the_block_closes(
    scripted_server: Any,
) -> None:
    ep = await start_episode(scripted_server)
    scripted_server.script.replies = [
        tool_call_text("get_weather", {"city": "Oslo"}, before="Checking.")
        + "\n" + tool_call_text("get_weather", {"city": "Lima"}),
    ]
    stream = await aclient(ep).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Oslo and Lima?"}],
        tools=[WEATHER_TOOL], stream=True,
    )
    chunks = [c async for c in stream]
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert content == "Checking."  # nothing of the <tool_call> blocks leaks as text
    deltas = [t for c in chunks for t in c.choices[0].delta.tool_calls or []]
    assert [d.index for d in deltas] == [0, 1]
    assert [d.function.name for d in deltas] == ["get_weather"] * 2
    assert [json.loads(d.function.arguments) for d in deltas] == [{"city": "Oslo"},
                                                                  {"city": "Lima"}]
    assert all(d.id and d.type == "function" for d in deltas)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # Streamed, the reply reassembles to the recorded message: the next turn extends it.
    (call,) = await stored_calls(scripted_server, ep.episode_id)
    reply = json.loads(call.chat_json)["reply"]
    assert reply["content"] == content
    assert [c["function"]["arguments"] for c in reply["tool_calls"]] == \
        [d.function.arguments for d in deltas]


async def test_tool_choice_none_hides_tools_and_returns_raw_text(scripted_server: Any) -> None:
    ep = await start_episode(scripted_server)
    text = tool_call_text("get_weather", {"city": "Rome"})
    scripted_server.script.replies = [text]
    r = await aclient(ep).chat.completions.create(
        model="tiny", messages=USER, tools=[WEATHER_TOOL], tool_choice="none")
    assert r.choices[0].message.content == text
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason == "stop"
    tokenizer = scripted_server.swarm.models["tiny"].tokenizer
    assert "<tools>" not in tokenizer.decode(scripted_server.script.prompts[0])
    # Sent back as the raw text it was, the reply still extends the recorded tokens.
    scripted_server.script.replies = ["ok"]
    await aclient(ep).chat.completions.create(
        model="tiny", tools=[WEATHER_TOOL], tool_choice="none",
        messages=[*USER, {"role": "assistant", "content": text},
                  {"role": "user", "content": "and?"}])
    first, second = await stored_calls(scripted_server, ep.episode_id)
    assert second.parent_call_id == first.call_id


async def test_parallel_tool_calls_false_needs_a_forced_choice(http_server: Any) -> None:
    ep = await start_episode(http_server)
    with pytest.raises(openai.BadRequestError) as err:
        await aclient(ep).chat.completions.create(model="tiny", messages=USER,
                                                  tools=[WEATHER_TOOL], parallel_tool_calls=False)
    assert err.value.body["param"] == "parallel_tool_calls"
    assert await stored_calls(http_server, ep.episode_id) == []


# -- completions ----------------------------------------------------------------------


async def test_completions_with_text_and_token_prompts(http_server: Any) -> None:
    ep = await start_episode(http_server)
    client = aclient(ep)
    r = await client.completions.create(model="tiny", prompt="Once upon a time", max_tokens=4,
                                        logprobs=2, extra_body={"return_token_ids": True})
    tokenizer = http_server.swarm.models["tiny"].tokenizer
    choice = r.choices[0]
    assert choice.model_extra["prompt_token_ids"] == tokenizer("Once upon a time")["input_ids"]
    assert len(choice.logprobs.token_logprobs) == len(choice.model_extra["token_ids"])
    ids = [5, 17, 99, 240]
    r2 = await client.completions.create(model="tiny", prompt=ids, max_tokens=3, n=2, seed=1,
                                         extra_body={"return_token_ids": True})
    assert [c.model_extra["prompt_token_ids"] for c in r2.choices] == [ids, ids]
    calls = await stored_calls(http_server, ep.episode_id)
    assert [c.prompt_ids for c in calls[1:]] == [ids, ids]
    assert r2.usage.prompt_tokens == len(ids)
    stream = await client.completions.create(model="tiny", prompt=ids, max_tokens=5,
                                             stream=True, extra_body={"return_token_ids": True})
    chunks = [c async for c in stream]
    last = (await stored_calls(http_server, ep.episode_id))[-1]
    assert [t for c in chunks for t in c.choices[0].model_extra["token_ids"]] == \
        last.completion_ids
    assert "".join(c.choices[0].text for c in chunks) == last.text


# -- errors ---------------------------------------------------------------------------


async def test_listing_models_with_server_keys(tiny_model_dir: Any, model_cache: Any,
                                              tmp_path: Any) -> None:
    from tests.http_fixtures import _start

    running = await _start({"cache_dir": model_cache, "admin_keys": ("adm",)})
    try:
        ep = await start_episode(running)
        for key in ("adm", ep.key):  # a server key or any episode key may list
            client = openai.AsyncOpenAI(base_url=ep.base_url, api_key=key, max_retries=0)
            assert [m.id for m in (await client.models.list()).data] == ["tiny"]
        client = openai.AsyncOpenAI(base_url=ep.base_url, api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            await client.models.list()
    finally:
        await running.stop()


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
    ep = await start_episode(http_server)
    engine = http_server.swarm.models["tiny"].engine
    client = aclient(ep, timeout=httpx.Timeout(0.5))
    with pytest.raises(openai.APITimeoutError):
        await client.chat.completions.create(model="tiny", messages=USER, max_tokens=1800,
                                             temperature=1.0)

    def idle() -> None:
        stats = engine.stats
        assert stats.active_rows == 0 and stats.waiting == 0

    await assert_eventually(idle, timeout=20)
    assert await stored_calls(http_server, ep.episode_id) == []
