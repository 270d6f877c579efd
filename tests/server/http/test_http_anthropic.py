"""The Anthropic Messages API (`/v1/messages`), driven by the official `anthropic` client."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from swarmrl_server.security import IN_PROCESS
from swarmrl_server.timelines.merge import merge_calls
from tests.http_support import Ep, start_episode, tool_call_text
from tests.store_support import stored_calls

USER = [{"role": "user", "content": "Name an animal."}]
WEATHER = {
    "name": "get_weather", "description": "Weather in a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def client(ep: Ep, **kw: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=ep.root_url, api_key=ep.key, max_retries=0, **kw)


async def test_message_records_the_call(http_server: Any) -> None:
    ep = await start_episode(http_server)
    m = await client(ep).messages.create(
        model="tiny", max_tokens=6, messages=USER, system="Be brief.",
        extra_body={"return_token_ids": True},
    )
    (call,) = await stored_calls(http_server, ep.episode_id)
    assert m.type == "message" and m.role == "assistant" and m.model == "tiny"
    assert [b.type for b in m.content] == ["text"]
    assert m.content[0].text == call.text
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens == len(call.prompt_ids)
    assert m.usage.output_tokens == len(call.completion_ids)
    assert m.model_extra["token_ids"] == call.completion_ids
    assert m.model_extra["swarmrl"]["call_ids"] == [call.call_id]
    # The system prompt went through the chat template as a system turn.
    tokenizer = http_server.swarm.models["tiny"].tokenizer
    assert tokenizer.decode(call.prompt_ids).startswith("<|im_start|>system\nBe brief.")


async def test_streaming_reassembles_to_the_recorded_call(http_server: Any) -> None:
    ep = await start_episode(http_server)
    async with client(ep).messages.stream(model="tiny", max_tokens=10, messages=USER) as s:
        texts = [t async for t in s.text_stream]
        final = await s.get_final_message()
    (call,) = await stored_calls(http_server, ep.episode_id)
    assert len(texts) >= 2  # token-by-token deltas
    assert "".join(texts) == call.text == final.content[0].text
    assert final.usage.output_tokens == len(call.completion_ids)


async def test_stream_message_start_carries_the_real_input_token_count(
    http_server: Any,
) -> None:
    ep = await start_episode(http_server)
    async with client(ep).messages.stream(model="tiny", max_tokens=4, messages=USER) as s:
        events = [e async for e in s]
    (call,) = await stored_calls(http_server, ep.episode_id)
    start = events[0]
    assert start.type == "message_start"
    assert start.message.usage.input_tokens == len(call.prompt_ids) > 0


async def test_tool_use_and_tool_result_stay_on_one_timeline(scripted_server: Any) -> None:
    ep = await start_episode(scripted_server)
    scripted_server.script.replies = [
        tool_call_text("get_weather", {"city": "Seoul"}, before="Looking it up."),
        "Sunny.",
    ]
    c = client(ep)
    messages: list[Any] = [{"role": "user", "content": "Weather in Seoul?"}]
    m = await c.messages.create(model="tiny", max_tokens=64, messages=messages, tools=[WEATHER])
    assert m.stop_reason == "tool_use"
    text, use = m.content
    assert text.text == "Looking it up."
    assert use.type == "tool_use" and use.name == "get_weather" and use.input == {"city": "Seoul"}
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in m.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                      "content": "sunny, 21C"}]},
    ]
    # The follow-up streams; the harness gets the text, the server extends the tokens.
    async with c.messages.stream(model="tiny", max_tokens=64, messages=messages,
                                 tools=[WEATHER]) as s:
        final = await s.get_final_message()
    assert final.content[0].text == "Sunny." and final.stop_reason == "end_turn"
    first, second = await stored_calls(scripted_server, ep.episode_id)
    assert second.parent_call_id == first.call_id
    _, stats = merge_calls([first, second])
    assert stats.timelines == 1 and stats.forks == 0


async def test_streamed_tool_use_block(scripted_server: Any) -> None:
    ep = await start_episode(scripted_server)
    scripted_server.script.replies = [tool_call_text("get_weather", {"city": "Cairo"})]
    async with client(ep).messages.stream(
        model="tiny", max_tokens=64, messages=USER, tools=[WEATHER]
    ) as s:
        events = [e async for e in s]
        final = await s.get_final_message()
    assert [b.type for b in final.content] == ["tool_use"]
    assert final.content[0].input == {"city": "Cairo"}
    assert final.stop_reason == "tool_use"
    assert any(e.type == "input_json" for e in events)


async def test_count_tokens_matches_the_rendered_prompt(http_server: Any) -> None:
    ep = await start_episode(http_server)
    c = client(ep)
    counted = await c.messages.count_tokens(model="tiny", messages=USER, system="Hi.")
    await c.messages.create(model="tiny", max_tokens=2, messages=USER, system="Hi.")
    (call,) = await stored_calls(http_server, ep.episode_id)
    assert counted.input_tokens == len(call.prompt_ids)


async def test_errors_take_anthropics_shape(http_server: Any) -> None:
    ep = await start_episode(http_server)
    with pytest.raises(anthropic.AuthenticationError) as auth:
        await anthropic.AsyncAnthropic(base_url=ep.root_url, api_key="sk-bad", max_retries=0
                                       ).messages.create(model="tiny", max_tokens=2, messages=USER)
    assert auth.value.body["type"] == "error"
    assert auth.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.NotFoundError):
        await client(ep).messages.create(model="claude-opus", max_tokens=2, messages=USER)
    with pytest.raises(anthropic.BadRequestError) as bad:
        await client(ep).messages.create(model="tiny", max_tokens=2, messages=USER,
                                         tool_choice={"type": "tool", "name": "nope"},
                                         tools=[WEATHER])
    assert "tool_choice.name" in bad.value.body["error"]["message"]
    async with httpx.AsyncClient(base_url=ep.root_url) as h:  # no max_tokens at all
        r = await h.post("/v1/messages", json={"model": "tiny", "messages": USER},
                         headers={"x-api-key": ep.key})
    assert r.status_code == 400
    assert r.json()["error"] == {"type": "invalid_request_error",
                                 "message": "max_tokens: field required"}
    http_server.swarm.episodes.policy.pause_wait_s = 0  # refused at once, not waited out
    await http_server.swarm.pause("weight sync")
    with pytest.raises(anthropic.RateLimitError) as limited:
        await client(ep).messages.create(model="tiny", max_tokens=2, messages=USER)
    assert limited.value.response.headers["retry-after"]
    await http_server.swarm.resume()
    await http_server.swarm.episodes.end(ep.episode_id, 0.0, "", caller=IN_PROCESS)
    with pytest.raises(anthropic.ConflictError):
        await client(ep).messages.create(model="tiny", max_tokens=2, messages=USER)


async def test_unsupported_blocks_are_refused_by_name(http_server: Any) -> None:
    ep = await start_episode(http_server)
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "AAAA"}}
    with pytest.raises(anthropic.BadRequestError) as err:
        await client(ep).messages.create(
            model="tiny", max_tokens=2,
            messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}])
    assert "messages[0].content[1]" in err.value.body["error"]["message"]
    assert await stored_calls(http_server, ep.episode_id) == []


def test_tool_result_conversion_orders_tool_messages_first() -> None:
    from swarmrl_server.http.messages.protocol import MessageParam
    from swarmrl_server.http.messages.serving import to_messages

    msgs = to_messages("sys", [
        MessageParam(role="user", content="q"),
        MessageParam(role="assistant", content=[
            {"type": "text", "text": "a"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]),
        MessageParam(role="user", content=[
            {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text",
                                                                      "text": "r"}]},
            {"type": "text", "text": "and?"}]),
    ])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "user"]
    assert json.loads(msgs[2]["tool_calls"][0]["function"]["arguments"]) == {"x": 1}
    assert msgs[3] == {"role": "tool", "tool_call_id": "t1", "content": "r"}
