"""A forced tool call cut by max_tokens is an incomplete tool call on every door, not text.

`tool_choice` "required" or a named function (Anthropic: `any` / `tool`) decodes the
reply as one call; when the token limit ends it first, each door reports what an agent
can act on: chat completions a `tool_calls` entry with the partial JSON arguments and
`finish_reason: "length"`, the Responses API an incomplete `function_call` item in an
incomplete response, Anthropic a `tool_use` block with `stop_reason: "max_tokens"`. The
official `openai` and `anthropic` clients parse each shape; none carries the half call
as text. The scripted engine says a known call; one test cuts the real tiny model
decoding under the grammar.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from swarmrl_server.episodes.chat import cut_tool_call
from tests.http_support import Ep, start_episode, tool_call_text
from tests.store_support import stored_calls

UNITS = {"type": "object", "properties": {"unit": {"enum": ["C", "F"]},
                                          "precise": {"type": "boolean"}},
         "required": ["unit", "precise"]}
TOOLS = [{"type": "function", "function": {"name": "set_units", "parameters": UNITS}}]
USER = [{"role": "user", "content": "Use Celsius."}]
CALL = tool_call_text("set_units", {"unit": "C", "precise": True})
CUT = 24
"""max_tokens that ends the scripted call inside its arguments."""


def oai(ep: Ep) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.key, max_retries=0)


def is_cut_prefix(arguments: str) -> bool:
    """`arguments` is a non-empty proper prefix of the call's arguments JSON."""
    full = json.dumps({"unit": "C", "precise": True})
    return bool(arguments) and full.startswith(arguments) and arguments != full


def test_cut_tool_call_reads_the_partial_arguments() -> None:
    head = '<tool_call>\n{"name": "set_units", "arguments": '
    assert cut_tool_call(head + '{"unit": "C", "pre', "call-ab12")["function"] == {
        "name": "set_units", "arguments": '{"unit": "C", "pre'}
    assert cut_tool_call(head + '{"unit": "C"}}\n</to', "call-x")["function"]["arguments"] \
        == '{"unit": "C"}'
    assert cut_tool_call("<tool_ca", "call-x")["function"] == {"name": "", "arguments": ""}
    assert cut_tool_call('<tool_call>\n{"name": "set_u', "call-x", "set_units")["function"] == {
        "name": "set_units", "arguments": ""}  # a named choice knows the name
    assert cut_tool_call("plain text", "call-x") is None
    assert cut_tool_call(CALL, "call-x") is None  # closed: a whole call, parsed as such
    assert cut_tool_call(head + "{", "call-ab12")["id"] == "call_ab12"  # stable per call


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", "named"])
async def test_chat_reports_a_cut_call_as_an_incomplete_tool_call(
        scripted_server: Any, stream: bool, choice: str) -> None:
    ep = await start_episode(scripted_server)
    scripted_server.script.replies = [CALL]
    tool_choice: Any = "required" if choice == "required" else \
        {"type": "function", "function": {"name": "set_units"}}
    kw: dict[str, Any] = dict(model="tiny", messages=USER, tools=TOOLS, tool_choice=tool_choice,
                              max_tokens=CUT)
    if stream:
        content, calls, finish = "", {}, None
        async for chunk in await oai(ep).chat.completions.create(**kw, stream=True):
            for c in chunk.choices:
                content += c.delta.content or ""
                finish = c.finish_reason or finish
                for d in c.delta.tool_calls or []:
                    calls.setdefault(d.index, ["", ""])
                    calls[d.index][0] += d.function.name or ""
                    calls[d.index][1] += d.function.arguments or ""
        assert content == "" and finish == "length"
        [(name, arguments)] = calls.values()
    else:
        r = await oai(ep).chat.completions.create(**kw)
        message = r.choices[0].message
        assert r.choices[0].finish_reason == "length" and message.content is None
        [call] = message.tool_calls
        name, arguments = call.function.name, call.function.arguments
    assert name == "set_units" and is_cut_prefix(arguments)
    [stored] = await stored_calls(scripted_server, ep.episode_id)
    assert stored.finish_reason == "length" and "<tool_call>" in stored.text  # recorded as is


async def test_an_unforced_cut_reply_stays_text(scripted_server: Any) -> None:
    ep = await start_episode(scripted_server)
    scripted_server.script.replies = [CALL]
    r = await oai(ep).chat.completions.create(model="tiny", messages=USER, tools=TOOLS,
                                              max_tokens=CUT)
    assert r.choices[0].finish_reason == "length" and not r.choices[0].message.tool_calls


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_report_an_incomplete_function_call(scripted_server: Any,
                                                            stream: bool) -> None:
    ep = await start_episode(scripted_server)
    scripted_server.script.replies = [CALL]
    kw: dict[str, Any] = dict(model="tiny", input="Use Celsius.", max_output_tokens=CUT,
                              tools=[{"type": "function", "name": "set_units",
                                      "parameters": UNITS}], tool_choice="required")
    if stream:
        events = [e async for e in await oai(ep).responses.create(**kw, stream=True)]
        assert not [e for e in events if e.type == "response.output_text.delta"]
        assert events[-1].type == "response.incomplete"
        r = events[-1].response
    else:
        r = await oai(ep).responses.create(**kw)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    [item] = r.output
    assert item.type == "function_call" and item.status == "incomplete"
    assert item.name == "set_units" and is_cut_prefix(item.arguments)
    again = await oai(ep).responses.retrieve(r.id)  # rebuilt from the call: the same item
    assert again.output[0].model_dump() == item.model_dump()


@pytest.mark.parametrize("stream", [False, True])
async def test_messages_report_a_cut_tool_use_with_max_tokens(scripted_server: Any,
                                                              stream: bool) -> None:
    ep = await start_episode(scripted_server)
    scripted_server.script.replies = [CALL]
    client = anthropic.AsyncAnthropic(base_url=ep.root_url, api_key=ep.key, max_retries=0)
    kw: dict[str, Any] = dict(model="tiny", max_tokens=CUT, messages=USER,
                              tools=[{"name": "set_units", "input_schema": UNITS}],
                              tool_choice={"type": "tool", "name": "set_units"})
    if stream:
        async with client.messages.stream(**kw) as s:
            m = await s.get_final_message()
    else:
        m = await client.messages.create(**kw)
    assert m.stop_reason == "max_tokens"
    [block] = m.content
    assert block.type == "tool_use" and block.name == "set_units"
    assert block.input in ({}, {"unit": "C"})  # what the partial JSON holds, as far as it went


async def test_the_real_model_cut_under_the_grammar(http_server: Any) -> None:
    """The tiny model decoding under the forced-call grammar, stopped inside the arguments."""
    ep = await start_episode(http_server)
    tokenizer = http_server.swarm.models["tiny"].tokenizer
    head = '<tool_call>\n{"name": "set_units", "arguments": {"unit": "'
    limit = len(tokenizer(head, add_special_tokens=False)["input_ids"]) + 1
    r = await oai(ep).chat.completions.create(
        model="tiny", messages=USER, tools=TOOLS, max_tokens=limit, seed=3,
        tool_choice={"type": "function", "function": {"name": "set_units"}})
    choice = r.choices[0]
    assert choice.finish_reason == "length" and choice.message.content is None
    [call] = choice.message.tool_calls
    [stored] = await stored_calls(http_server, ep.episode_id)
    assert stored.constrained and stored.text.startswith("<tool_call>")
    # The grammar's tokens may be shorter than the tokenizer's: the cut can fall before
    # the arguments, even inside the name, which the named choice then supplies.
    assert call.function.name == "set_units"
    assert '{"unit": "'.startswith(call.function.arguments) or \
        call.function.arguments.startswith('{"unit": "')
