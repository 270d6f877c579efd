"""The Responses API door (`/v1/responses`), driven by the official `openai` client.

The client is the oracle: `responses.create` (unary and `stream=True`) and the
`responses.stream` helper must parse what the shim sends. Streams are validated event
by event (`check_stream`): types and order, `sequence_number` strictly increasing,
deltas adding up to the finished text and arguments.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import openai
import pytest

from swarmrl_server.timelines.merge import merge_calls
from tests.http_support import Ep, start_episode, tool_call_text
from tests.server_fixtures import ServerFactory
from tests.store_support import stored_calls

WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Seoul", "Lima"]}},
        "required": ["city"], "additionalProperties": False}
UNITS = {"type": "object", "properties": {"unit": {"enum": ["C", "F"]}},
         "required": ["unit"], "additionalProperties": False}
FORCED_TOOLS = [{"type": "function", "name": "get_weather", "parameters": CITY},
                {"type": "function", "name": "set_units", "parameters": UNITS}]
SCHEMAS = {"get_weather": CITY, "set_units": UNITS}


def aclient(ep: Ep) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.key, max_retries=0)


def check_stream(events: list[Any]) -> Any:
    """Validates a streamed response event by event; returns the final response."""
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"], types
    assert types[-1] in ("response.completed", "response.incomplete"), types
    seqs = [e.sequence_number for e in events]
    assert all(b > a for a, b in itertools.pairwise(seqs)), seqs
    final = events[-1].response
    assert events[0].response.id == final.id and events[0].response.status == "in_progress"
    assert events[0].response.output == []
    body = events[2:-1]
    i = 0
    for index, item in enumerate(final.output):  # each item: added, its events, done
        added = body[i]
        assert (added.type, added.output_index, added.item.id) == \
            ("response.output_item.added", index, item.id)
        i += 1
        if item.type == "message":
            assert body[i].type == "response.content_part.added"
            i += 1
            deltas = []
            while body[i].type == "response.output_text.delta":
                assert (body[i].item_id, body[i].output_index) == (item.id, index)
                deltas.append(body[i].delta)
                i += 1
            done = body[i]
            assert done.type == "response.output_text.done"
            assert "".join(deltas) == done.text == item.content[0].text
            assert body[i + 1].type == "response.content_part.done"
            assert body[i + 1].part.text == done.text
            i += 2
        else:
            assert item.type == "function_call"
            assert added.item.arguments == ""
            deltas = []
            while body[i].type == "response.function_call_arguments.delta":
                deltas.append(body[i].delta)
                i += 1
            done = body[i]
            assert done.type == "response.function_call_arguments.done"
            assert "".join(deltas) == done.arguments == item.arguments
            i += 1
        assert (body[i].type, body[i].output_index) == ("response.output_item.done", index)
        assert body[i].item.id == item.id
        i += 1
    assert i == len(body), types[i + 2:]
    return final


async def streamed(client: openai.AsyncOpenAI, **kw: Any) -> Any:
    events = [e async for e in await client.responses.create(**kw, stream=True)]
    return check_stream(events)


# -- basics ---------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_create_records_the_engines_exact_ids(http_server: Any, stream: bool) -> None:
    ep = await start_episode(http_server)
    kw: dict[str, Any] = dict(model="tiny", input="Name a fruit.", instructions="Be terse.",
                              max_output_tokens=12, metadata={"k": "v"},
                              extra_body={"return_token_ids": True, "seed": 5})
    client = aclient(ep)
    r = await streamed(client, **kw) if stream else await client.responses.create(**kw)
    (call,) = await stored_calls(http_server, ep.episode_id)
    assert r.object == "response" and r.model == "tiny" and r.metadata == {"k": "v"}
    assert r.instructions == "Be terse."
    (msg,) = r.output
    assert msg.type == "message" and msg.role == "assistant"
    assert r.output_text == msg.content[0].text == call.text
    assert r.status == ("incomplete" if call.finish_reason == "length" else "completed")
    if r.status == "incomplete":
        assert r.incomplete_details.reason == "max_output_tokens"
    assert r.model_extra["prompt_token_ids"] == call.prompt_ids
    assert r.model_extra["token_ids"] == call.completion_ids
    assert r.usage.input_tokens == len(call.prompt_ids)
    assert r.usage.output_tokens == len(call.completion_ids) <= 12
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.model_extra["swarmrl"]["call_ids"] == [call.call_id]
    assert json.loads(call.chat_json)["messages"][0] == {"role": "system",
                                                         "content": "Be terse."}


async def test_stream_is_token_by_token_and_agrees_with_unary(http_server: Any) -> None:
    ep = await start_episode(http_server)
    client = aclient(ep)
    kw: dict[str, Any] = dict(model="tiny", input="Name a fruit.", max_output_tokens=10,
                              temperature=1.0, extra_body={"seed": 11})
    unary = await client.responses.create(**kw)
    events = [e async for e in await client.responses.create(**kw, stream=True)]
    final = check_stream(events)
    assert final.output_text == unary.output_text
    assert sum(e.type == "response.output_text.delta" for e in events) >= 2


async def test_responses_stream_helper(scripted_server: Any) -> None:
    ep = await start_episode(scripted_server)
    scripted_server.script.replies = [tool_call_text("get_weather", {"city": "Rome"},
                                                     before="Checking.")]
    async with aclient(ep).responses.stream(model="tiny", input="Rome?", tools=[WEATHER]) as s:
        text = "".join([e.delta async for e in s if e.type == "response.output_text.delta"])
        final = await s.get_final_response()
    (call,) = await stored_calls(scripted_server, ep.episode_id)
    assert final.status == "completed"
    assert final.output_text == text == "Checking."
    fc = final.output[1]
    assert (fc.name, json.loads(fc.arguments)) == ("get_weather", {"city": "Rome"})
    assert json.loads(call.chat_json)["reply"]["tool_calls"][0]["id"] == fc.call_id


async def test_logprobs_are_included_on_request(http_server: Any) -> None:
    ep = await start_episode(http_server)
    r = await aclient(ep).responses.create(
        model="tiny", input="Hi", max_output_tokens=5, top_logprobs=2,
        include=["message.output_text.logprobs"])
    (call,) = await stored_calls(http_server, ep.episode_id)
    logprobs = r.output[0].content[0].logprobs
    assert [e.logprob for e in logprobs] == pytest.approx(call.logprobs)
    assert all(len(e.top_logprobs) == 2 for e in logprobs)


@pytest.mark.parametrize("stream", [False, True])
async def test_cut_off_response_is_incomplete(scripted_server: Any, stream: bool) -> None:
    ep = await start_episode(scripted_server)
    scripted_server.script.replies = ["one two three four five six seven eight"]
    kw: dict[str, Any] = dict(model="tiny", input="Count.", max_output_tokens=3)
    client = aclient(ep)
    r = await streamed(client, **kw) if stream else await client.responses.create(**kw)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.output[0].status == "incomplete" and r.usage.output_tokens == 3


def test_input_items_become_chat_messages() -> None:
    from swarmrl_server.http.responses.items import to_messages
    from swarmrl_server.http.responses.protocol import ResponsesRequest

    items = [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"},
                                                         {"type": "input_text", "text": "b"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "call_2", "name": "g", "arguments": '{"x": 1}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "one"},
        {"type": "function_call_output", "call_id": "call_2",
         "output": [{"type": "input_text", "text": "two"}]},
        {"type": "function_call", "call_id": "call_3", "name": "f", "arguments": "{}"},
    ]
    req = ResponsesRequest.model_validate({"model": "tiny", "input": items})
    assert to_messages(req.input) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "call_2", "type": "function", "function": {"name": "g",
                                                              "arguments": '{"x": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "one"},
        {"role": "tool", "tool_call_id": "call_2", "content": "two"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_3", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
    ]


# -- tools ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", "named"])
async def test_forced_tool_choice(http_server: Any, choice: str, stream: bool) -> None:
    ep = await start_episode(http_server)
    tool_choice: Any = "required" if choice == "required" else \
        {"type": "function", "name": "set_units"}
    kw: dict[str, Any] = dict(model="tiny", input="Use Celsius.", tools=FORCED_TOOLS,
                              tool_choice=tool_choice, max_output_tokens=96,
                              extra_body={"seed": 7})
    if choice == "named":  # a text format does not shape a forced call (as on OpenAI)
        kw["text"] = {"format": {"type": "json_schema", "name": "units", "schema": UNITS}}
    client = aclient(ep)
    r = await streamed(client, **kw) if stream else await client.responses.create(**kw)
    (item,) = r.output
    assert item.type == "function_call" and r.status == "completed"
    if choice == "named":
        assert item.name == "set_units"
    jsonschema.validate(json.loads(item.arguments), SCHEMAS[item.name])
    (call,) = await stored_calls(http_server, ep.episode_id)
    assert call.constrained
    # The episode holds the call id the client saw.
    assert json.loads(call.chat_json)["reply"]["tool_calls"][0]["id"] == item.call_id


@pytest.mark.parametrize("stream", [False, True])
async def test_json_schema_text_format(http_server: Any, stream: bool) -> None:
    ep = await start_episode(http_server)
    kw: dict[str, Any] = dict(model="tiny", input="Units?", max_output_tokens=64,
                              text={"format": {"type": "json_schema", "name": "units",
                                               "schema": UNITS}})
    client = aclient(ep)
    r = await streamed(client, **kw) if stream else await client.responses.create(**kw)
    jsonschema.validate(json.loads(r.output_text), UNITS)


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_loop_with_function_call_output_is_one_timeline(
    scripted_server: Any, stream: bool,
) -> None:
    ep = await start_episode(scripted_server)
    client = aclient(ep)
    scripted_server.script.replies = [
        tool_call_text("get_weather", {"city": "Paris"}, before="Let me check."),
        tool_call_text("get_weather", {"city": "Oslo"}),
        "Paris is warmer.",
    ]
    history: list[Any] = [{"role": "user", "content": "Compare Paris and Oslo."}]
    for turn in range(3):
        kw: dict[str, Any] = dict(model="tiny", input=history, tools=[WEATHER],
                                  instructions="Use tools.")
        r = await streamed(client, **kw) if stream else await client.responses.create(**kw)
        assert r.model_extra["swarmrl"]["fork_reason"] == ""
        history += [item.model_dump(exclude_none=True) for item in r.output]
        calls = [item for item in r.output if item.type == "function_call"]
        if turn == 0:
            assert [i.type for i in r.output] == ["message", "function_call"]
            assert r.output_text == "Let me check."
        history += [{"type": "function_call_output", "call_id": c.call_id, "output": "mild"}
                    for c in calls]
    assert r.output_text == "Paris is warmer."
    stored = await stored_calls(scripted_server, ep.episode_id)
    timelines, stats = merge_calls(stored)
    assert len(stored) == 3 and stats.timelines == 1 and stats.forks == 0
    # Each function_call_output answered the id that the episode recorded for the call.
    replies = [json.loads(c.chat_json)["reply"] for c in stored]
    tool_msgs = [m for m in json.loads(stored[2].chat_json)["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == \
        [replies[0]["tool_calls"][0]["id"], replies[1]["tool_calls"][0]["id"]]


# -- stored responses -----------------------------------------------------------------


async def test_previous_response_id_extends_the_stored_call(scripted_server: Any) -> None:
    ep = await start_episode(scripted_server)
    client = aclient(ep)
    scripted_server.script.replies = [
        tool_call_text("get_weather", {"city": "Lima"}), "Lima is sunny.", "Bye."]
    first = await client.responses.create(model="tiny", input="Weather in Lima?",
                                          tools=[WEATHER], instructions="Be brief.")
    (fc,) = first.output
    second = await client.responses.create(
        model="tiny", previous_response_id=first.id, tools=[WEATHER], instructions="Be brief.",
        input=[{"type": "function_call_output", "call_id": fc.call_id, "output": "sunny"}])
    third = await streamed(client, model="tiny", previous_response_id=second.id,
                           tools=[WEATHER], instructions="Be brief.", input="Thanks!")
    assert (second.output_text, third.output_text) == ("Lima is sunny.", "Bye.")
    assert third.previous_response_id == second.id
    stored = await stored_calls(scripted_server, ep.episode_id)
    for earlier, later in itertools.pairwise(stored):
        assert later.parent_call_id == earlier.call_id
    _, stats = merge_calls(stored)
    assert stats.timelines == 1 and stats.forks == 0
    # GET rebuilds what was returned.
    got = await client.responses.retrieve(first.id)
    assert got.model_dump(exclude={"swarmrl"}) == first.model_dump(exclude={"swarmrl"})
    assert (await client.responses.retrieve(third.id)).output_text == "Bye."


async def test_unknown_unstored_and_other_episode_ids_are_404(http_server: Any) -> None:
    ep, other = await start_episode(http_server), await start_episode(http_server)
    client = aclient(ep)
    theirs = await aclient(other).responses.create(model="tiny", input="Hi", max_output_tokens=2)
    unstored = await client.responses.create(model="tiny", input="Hi", max_output_tokens=2,
                                             store=False)
    for rid in (theirs.id, unstored.id, "resp_nope"):
        with pytest.raises(openai.NotFoundError) as err:
            await client.responses.retrieve(rid)
        assert err.value.body["param"] == "response_id"  # type: ignore[index]
        with pytest.raises(openai.NotFoundError) as err:
            await client.responses.create(model="tiny", input="Hi", previous_response_id=rid)
        assert err.value.body["param"] == "previous_response_id"  # type: ignore[index]
    assert len(await stored_calls(http_server, ep.episode_id)) == 1
    assert (await aclient(other).responses.retrieve(theirs.id)).id == theirs.id


async def test_key_in_the_base_url_and_tool_choice_none(scripted_server: Any) -> None:
    ep = await start_episode(scripted_server)
    client = openai.AsyncOpenAI(base_url=f"{ep.root_url}/k/{ep.key}/v1", api_key="ignored",
                                max_retries=0)
    raw = tool_call_text("get_weather", {"city": "Rome"})
    scripted_server.script.replies = [raw]
    r = await client.responses.create(model="tiny", input="Rome?", tools=[WEATHER],
                                      tool_choice="none")
    # Tools hidden from the model, the reply returned as the raw text it generated.
    assert [i.type for i in r.output] == ["message"] and r.output_text == raw
    assert (await client.responses.retrieve(r.id)).output_text == raw
    (call,) = await stored_calls(scripted_server, ep.episode_id)
    assert json.loads(call.chat_json)["tools"] is None


async def test_history_passed_back_merges_into_one_timeline(http_server: Any) -> None:
    ep = await start_episode(http_server)
    client = aclient(ep)
    history: list[Any] = []
    for i, question in enumerate(["Name a fruit.", "A color?", "A city?", "A number?"]):
        history.append({"role": "user", "content": question})
        kw: dict[str, Any] = dict(model="tiny", input=history, instructions="Be terse.",
                                  max_output_tokens=8, extra_body={"seed": i})
        r = await streamed(client, **kw) if i % 2 else await client.responses.create(**kw)
        assert r.model_extra["swarmrl"]["fork_reason"] == ""
        history += [item.model_dump(exclude_none=True) for item in r.output]
    stored = await stored_calls(http_server, ep.episode_id)
    timelines, stats = merge_calls(stored)
    assert stats.timelines == 1 and stats.forks == 0
    assert timelines[0].token_ids == stored[-1].prompt_ids + stored[-1].completion_ids


async def test_request_id_replays_the_recorded_response(http_server: Any) -> None:
    ep = await start_episode(http_server)
    client = aclient(ep)
    kw: dict[str, Any] = dict(model="tiny", input="Hi", max_output_tokens=4,
                              extra_body={"request_id": "turn-1"})
    first = await client.responses.create(**kw)
    again = await client.responses.create(**kw)
    assert again.model_dump() == first.model_dump()
    assert len(await stored_calls(http_server, ep.episode_id)) == 1


# -- refusals -------------------------------------------------------------------------


async def test_unsupported_options_are_400_naming_the_field(http_server: Any) -> None:
    ep = await start_episode(http_server)
    image = {"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}
    bad: list[tuple[dict[str, Any], str]] = [
        (dict(tools=[{"type": "web_search"}]), "tools[0].type"),
        (dict(background=True), "background"),
        (dict(truncation="auto"), "truncation"),
        (dict(extra_body={"conversation": "conv_1"}), "conversation"),
        (dict(reasoning={"effort": "high"}), "reasoning"),
        (dict(tool_choice="required"), "tool_choice"),
        (dict(tools=FORCED_TOOLS, tool_choice={"type": "function", "name": "nope"}),
         "tool_choice.name"),
        (dict(tools=FORCED_TOOLS, tool_choice={"type": "web_search_preview"}), "tool_choice"),
        (dict(tools=FORCED_TOOLS, parallel_tool_calls=False), "parallel_tool_calls"),
        (dict(text={"format": {"type": "json_schema", "name": "x"}}), "text.format.schema"),
        (dict(text={"format": {"type": "yaml"}}), "text.format.type"),
        (dict(include=["nope"]), "include[0]"),
        (dict(input=[image]), "input[0].content[0].type"),
        (dict(input=[{"type": "item_reference", "id": "msg_1"}]), "input[0].type"),
        (dict(input=[{"type": "function_call", "call_id": "c", "name": "f",
                      "arguments": "[1]"}]), "input[0].arguments"),
        (dict(input=[]), "input"),
        (dict(max_output_tokens=10**6), "max_output_tokens"),
    ]
    for kw, param in bad:
        kw = {"model": "tiny", "input": "Hi", **kw}
        with pytest.raises(openai.BadRequestError) as err:
            await aclient(ep).responses.create(**kw)
        assert err.value.body["param"] == param, kw  # type: ignore[index]
    assert await stored_calls(http_server, ep.episode_id) == []


async def test_a_stored_response_is_continued_after_a_server_restart(
    make_server: ServerFactory,
) -> None:
    """The stored response lives in its call's record: a restarted server (same data dir)
    continues it by id, and the new turn still extends the call's exact ids."""
    running = await make_server(http=True)
    ep = await start_episode(running)
    first = await aclient(ep).responses.create(model="tiny", input="Hi",
                                               instructions="Be brief.",
                                               max_output_tokens=4)
    await make_server.stop(running)
    running = await make_server(running.config)
    ep = Ep(ep.episode_id, ep.key, running.openai_base_url)
    got = await aclient(ep).responses.retrieve(first.id)
    assert got.output_text == first.output_text
    second = await aclient(ep).responses.create(
        model="tiny", previous_response_id=first.id, instructions="Be brief.",
        input="More.", max_output_tokens=4)
    assert second.model_extra["swarmrl"]["fork_reason"] == ""
    calls = await stored_calls(running, ep.episode_id)
    assert calls[1].parent_call_id == calls[0].call_id
