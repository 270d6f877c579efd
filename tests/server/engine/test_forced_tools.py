"""Forced tool calls and JSON formats, decoded under a grammar by the real (random) tiny model.

The model has never seen a tool call; only the grammar (xgrammar, on CPU) makes its
reply one. The official openai, anthropic and openai-agents clients and LangChain's
ChatOpenAI are the oracles: a forced call must come back as a tool call, streamed and
not, whose arguments parse as JSON matching the tool's schema. The schemas use enums
so that a random model's reply ends within a few dozen tokens.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import anthropic
import jsonschema
import openai
import pytest

from tests.http_support import Ep, start_episode
from tests.store_support import stored_calls

CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Seoul", "Lima"]}},
        "required": ["city"], "additionalProperties": False}
UNITS = {"type": "object", "properties": {"unit": {"enum": ["C", "F"]},
                                          "precise": {"type": "boolean"}},
         "required": ["unit", "precise"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": CITY}},
    {"type": "function", "function": {"name": "set_units", "parameters": UNITS}},
]
SCHEMAS = {"get_weather": CITY, "set_units": UNITS}
USER = [{"role": "user", "content": "What's the weather in Paris?"}]
MAX_TOKENS = 96


def oai(ep: Ep) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.key, max_retries=0)


def check_call(name: str, arguments: str | dict[str, Any]) -> dict[str, Any]:
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(args, SCHEMAS[name])
    return args


# -- OpenAI ----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", ["required", "named"])
async def test_openai_forced_tool_call(http_server: Any, choice: str, stream: bool) -> None:
    ep = await start_episode(http_server)
    tool_choice: Any = "required" if choice == "required" else \
        {"type": "function", "function": {"name": "set_units"}}
    kw: dict[str, Any] = dict(model="tiny", messages=USER, tools=TOOLS, tool_choice=tool_choice,
                              max_tokens=MAX_TOKENS, seed=7)
    if stream:
        async with oai(ep).chat.completions.stream(**kw) as s:
            async for _ in s:
                pass
            r = await s.get_final_completion()
    else:
        r = await oai(ep).chat.completions.create(**kw)
    (call,) = r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason == "tool_calls"
    if choice == "named":
        assert call.function.name == "set_units"
    check_call(call.function.name, call.function.arguments)
    (stored,) = await stored_calls(http_server, ep.episode_id)
    assert stored.constrained and stored.completion_ids[-1] in \
        http_server.swarm.models["tiny"].engine.eos_token_ids


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_json_schema_response_format(http_server: Any, stream: bool) -> None:
    ep = await start_episode(http_server)
    fmt = {"type": "json_schema", "json_schema": {"name": "units", "schema": UNITS}}
    kw: dict[str, Any] = dict(model="tiny", messages=USER, response_format=fmt,
                              max_tokens=MAX_TOKENS, seed=3)
    if stream:
        parts = [c.choices[0].delta.content or "" async for c in
                 await oai(ep).chat.completions.create(**kw, stream=True) if c.choices]
        text = "".join(parts)
    else:
        text = (await oai(ep).chat.completions.create(**kw)).choices[0].message.content
    jsonschema.validate(json.loads(text), UNITS)


async def test_bad_forced_choices_are_400_naming_the_field(http_server: Any) -> None:
    ep = await start_episode(http_server)
    bad = [
        (dict(tool_choice="required"), "tool_choice"),
        (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}),
         "tool_choice.function.name"),
        (dict(response_format={"type": "yaml"}), "response_format.type"),
        (dict(tools=TOOLS, tool_choice="required", response_format={"type": "yaml"}),
         "response_format.type"),
    ]
    for kw, param in bad:
        with pytest.raises(openai.BadRequestError) as err:
            await oai(ep).chat.completions.create(model="tiny", messages=USER, max_tokens=4, **kw)
        assert err.value.body["param"] == param, kw  # type: ignore[index]
    assert await stored_calls(http_server, ep.episode_id) == []


async def test_a_forced_call_with_a_response_format_is_the_tool_call(http_server: Any) -> None:
    """What the Agents SDK sends for an agent with an `output_type` and a forced
    tool_choice: both. As on OpenAI's API, the forced reply is a tool call, which the
    format does not shape."""
    ep = await start_episode(http_server)
    fmt = {"type": "json_schema", "json_schema": {"name": "units", "schema": UNITS}}
    r = await oai(ep).chat.completions.create(
        model="tiny", messages=USER, tools=TOOLS, tool_choice="required", response_format=fmt,
        max_tokens=MAX_TOKENS, seed=5)
    (call,) = r.choices[0].message.tool_calls
    check_call(call.function.name, call.function.arguments)
    (stored,) = await stored_calls(http_server, ep.episode_id)
    assert stored.constrained and "<tool_call>" in stored.grammar


# -- Anthropic -------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_weather"}])
async def test_anthropic_forced_tool_use(http_server: Any, choice: dict[str, Any],
                                         stream: bool) -> None:
    ep = await start_episode(http_server)
    client = anthropic.AsyncAnthropic(base_url=ep.root_url, api_key=ep.key, max_retries=0)
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
             for t in TOOLS]
    kw: dict[str, Any] = dict(model="tiny", max_tokens=MAX_TOKENS, messages=USER, tools=tools,
                              tool_choice=choice)
    if stream:
        async with client.messages.stream(**kw) as s:
            m = await s.get_final_message()
    else:
        m = await client.messages.create(**kw)
    assert m.stop_reason == "tool_use"
    (block,) = [b for b in m.content if b.type == "tool_use"]
    if choice["type"] == "tool":
        assert block.name == "get_weather"
    check_call(block.name, block.input)


# -- OpenAI Agents SDK and LangChain ---------------------------------------------------


@pytest.mark.parametrize("tool_choice", ["required", "get_weather"])
async def test_openai_agents_sdk_with_forced_tool_choice(http_server: Any, tool_choice: str) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    seen: list[str] = []

    @function_tool
    def get_weather(city: Literal["Paris", "Seoul", "Lima"]) -> str:
        """Weather in a city."""
        seen.append(city)
        return f"sunny in {city}"

    ep = await start_episode(http_server)
    agent = Agent(
        name="forecaster", instructions="Use the tool.", tools=[get_weather],
        model=OpenAIChatCompletionsModel(model="tiny", openai_client=oai(ep)),
        model_settings=ModelSettings(tool_choice=tool_choice, max_tokens=MAX_TOKENS),
        tool_use_behavior="stop_on_first_tool",
    )
    for stream in (False, True):
        if stream:
            run = Runner.run_streamed(agent, "Weather in Lima?", max_turns=2)
            async for _ in run.stream_events():
                pass
        else:
            run = await Runner.run(agent, "Weather in Lima?", max_turns=2)
        assert run.final_output == f"sunny in {seen[-1]}"
    assert len(seen) == 2 and set(seen) <= {"Paris", "Seoul", "Lima"}


async def test_langchain_bind_tools_forced(http_server: Any) -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def set_units(unit: Literal["C", "F"], precise: bool) -> str:
        """Sets the temperature unit."""
        return unit

    ep = await start_episode(http_server)
    llm = ChatOpenAI(model="tiny", base_url=ep.base_url, api_key=ep.key, max_retries=0,
                     max_tokens=MAX_TOKENS)
    for tool_choice in ("set_units", "required"):
        bound = llm.bind_tools([set_units], tool_choice=tool_choice)
        msg = await bound.ainvoke("Use Celsius.")
        streamed = None
        async for chunk in bound.astream("Use Celsius."):
            streamed = chunk if streamed is None else streamed + chunk
        for m in (msg, streamed):
            (call,) = m.tool_calls
            assert call["name"] == "set_units"
            check_call("set_units", call["args"])
    assert len(await stored_calls(http_server, ep.episode_id)) == 4
