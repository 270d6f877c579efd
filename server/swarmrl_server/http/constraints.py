"""Forced tool calls and JSON response formats, as grammars the engine decodes under.

OpenAI's `tool_choice` "required" or a named function, Anthropic's `any` or `tool`,
and OpenAI's `response_format` `json_object` / `json_schema` all become one xgrammar
structural tag (see `engine.grammar`): the model can then only produce what was
asked for, in the chat template's own tool-call format, so the reply parses into a
tool call whose arguments match the tool's schema. A forced choice yields exactly
one tool call. Calls decoded this way are recorded as constrained and trained as
documented in `engine.grammar`.

A forced choice together with a response format decodes the forced call: the format
shapes a text reply, and a forced reply is a tool call (OpenAI lets a tool call bypass
`response_format` too). The OpenAI Agents SDK sends both on every turn of an agent with
an `output_type` and `ModelSettings(tool_choice="required")`: the first turn calls a
tool, and after it (`reset_tool_choice`) the format shapes the final answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from swarmrl_server.engine.grammar import json_schema_tag, tool_call_tag
from swarmrl_server.episodes.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from swarmrl_server.http.errors import HttpError

Tool = tuple[str, dict[str, Any]]
"""(function name, parameters JSON schema)."""


def forced_tool_tag(tools: Sequence[Tool], name: str | None, field: str) -> str:
    """The grammar for one call to `name` (None: to any of `tools`); 400 naming `field`
    when there is nothing to call."""
    if not tools:
        raise HttpError(400, f"{field}: forcing a tool call needs `tools`", param=field)
    if name is not None:
        chosen = [t for t in tools if t[0] == name]
        if not chosen:
            raise HttpError(400, f"{field}: {name!r} is not one of the tools "
                            f"{[t[0] for t in tools]}", param=field)
        tools = chosen
    return tool_call_tag(tools, TOOL_CALL_OPEN, TOOL_CALL_CLOSE)


def check_parallel_tool_calls(parallel: bool | None, has_tools: bool, tool_choice: Any) -> None:
    """`parallel_tool_calls: false` can be honoured only for a forced choice, which is
    decoded as exactly one call; a free one cannot be limited."""
    forced = tool_choice not in (None, "auto", "none")
    if has_tools and parallel is False and not forced:
        raise HttpError(
            400, "parallel_tool_calls: false is supported only with a forced tool_choice "
            "(the model may call several tools in one turn)", param="parallel_tool_calls",
        )


def response_format_tag(response_format: dict[str, Any] | None) -> str | None:
    """The grammar for an OpenAI `response_format` (None for text)."""
    if not response_format:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return json_schema_tag({"type": "object"})
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), (dict, bool)):
            raise HttpError(400, "response_format.json_schema.schema: must be a JSON schema "
                            "object", param="response_format.json_schema.schema")
        return json_schema_tag(spec.get("schema", {}))
    raise HttpError(400, f"response_format.type: must be 'text', 'json_object' or "
                    f"'json_schema'; got {kind!r}", param="response_format.type")


def openai_constraint(tools: Sequence[Tool], tool_choice: Any,
                      response_format: dict[str, Any] | None) -> str | None:
    """The grammar an OpenAI chat request asks for, if any (`tool_choice` is "auto",
    "none", "required", None, or a named-function object with `.function`)."""
    fmt = response_format_tag(response_format)
    forced: str | None = None
    if tool_choice == "required":
        forced = forced_tool_tag(tools, None, "tool_choice")
    elif tool_choice is not None and not isinstance(tool_choice, str):
        name = (tool_choice.function or {}).get("name")
        if not isinstance(name, str) or not name:
            raise HttpError(400, "tool_choice.function.name: required",
                            param="tool_choice.function.name")
        forced = forced_tool_tag(tools, name, "tool_choice.function.name")
    return forced or fmt  # a forced call is a tool call, which the format does not shape


def anthropic_constraint(tools: Sequence[Tool], choice_type: str | None,
                         name: str | None) -> str | None:
    """The grammar an Anthropic `tool_choice` asks for (`any`, `tool`), if any."""
    if choice_type == "any":
        return forced_tool_tag(tools, None, "tool_choice")
    if choice_type == "tool":
        if not name:
            raise HttpError(400, "tool_choice.name: required for type 'tool'",
                            param="tool_choice.name")
        return forced_tool_tag(tools, name, "tool_choice.name")
    return None


def responses_constraint(tools: Sequence[Tool], tool_choice: Any,
                         text_format: dict[str, Any] | None) -> str | None:
    """The grammar a Responses API request asks for, if any: `tool_choice` "required" or
    {"type": "function", "name": ...}, and `text.format` json_object / json_schema
    (already validated by the protocol: a json_schema format carries its `schema`)."""
    fmt: str | None = None
    kind = (text_format or {}).get("type")
    if kind == "json_object":
        fmt = json_schema_tag({"type": "object"})
    elif kind == "json_schema":
        fmt = json_schema_tag((text_format or {}).get("schema") or {})
    forced: str | None = None
    if tool_choice == "required":
        forced = forced_tool_tag(tools, None, "tool_choice")
    elif isinstance(tool_choice, dict):
        forced = forced_tool_tag(tools, tool_choice["name"], "tool_choice.name")
    return forced or fmt
