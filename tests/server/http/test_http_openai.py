"""The OpenAI-compatible shim, driven by the official `openai` client (max_retries=0)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import grpc
import openai
import pytest

from swarmrl_proto.v1 import episode_service_pb2 as ep_pb
from swarmrl_proto.v1 import episode_service_pb2_grpc as ep_grpc
from swarmrl_proto.v1 import session_service_pb2 as s_pb
from swarmrl_proto.v1 import session_service_pb2_grpc as s_grpc
from tests.http_support import WEATHER_TOOL, Ep, aclient, start_episode, tool_call_text
from tests.store_support import stored_calls

USER = [{"role": "user", "content": "Name a fruit."}]


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
                         "policy_version": 0, "overridden": {}, "fork_reason": "",
                         "version_spans": [[[0, 0, len(call.completion_ids)]]]}


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
