"""Anthropic messages <-> the registry's chat messages, and a reply as content blocks.

Anthropic messages are converted to the registry's OpenAI-shaped messages
(`tool_use` blocks -> assistant `tool_calls`, `tool_result` blocks -> `tool`
messages, `system` -> a system message), so a CLI harness that speaks Anthropic
gets the same rendering, exact-token extension and tool parsing as an OpenAI
client. Text blocks join with "" so that a reply streamed as several text blocks
and sent back verbatim is the same turn.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import from_json

from swarmrl_server.episodes.chat import Message
from swarmrl_server.http.errors import HttpError
from swarmrl_server.http.messages.protocol import (
    ContentBlock,
    MessageParam,
    ThinkingConfig,
    ToolChoice,
    ToolParam,
)


def _text(blocks: str | list[ContentBlock] | None, where: str) -> str:
    if blocks is None or isinstance(blocks, str):
        return blocks or ""
    for j, b in enumerate(blocks):
        if b.type != "text" or b.text is None:
            raise HttpError(400, f"{where}[{j}]: only text blocks are supported here; got "
                            f"{b.type!r}", param=f"{where}[{j}].type")
    return "".join(b.text or "" for b in blocks)


def to_messages(system: str | list[ContentBlock] | None,
                messages: list[MessageParam]) -> list[Message]:
    """Anthropic messages -> the registry's OpenAI-shaped message dicts."""
    out: list[Message] = []
    if system:
        out.append({"role": "system", "content": _text(system, "system")})
    for i, m in enumerate(messages):
        where = f"messages[{i}].content"
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
        texts: list[str] = []
        calls: list[Message] = []
        results: list[Message] = []
        for j, b in enumerate(m.content):
            at = f"{where}[{j}]"
            if b.type == "text" and b.text is not None:
                texts.append(b.text)
            elif b.type == "tool_use" and m.role == "assistant":
                if not b.name:
                    raise HttpError(400, f"{at}.name: must not be empty", param=f"{at}.name")
                calls.append({"id": b.id or "", "type": "function", "function": {
                    "name": b.name, "arguments": json.dumps(b.input or {})}})
            elif b.type == "tool_result" and m.role == "user":
                if not b.tool_use_id:
                    raise HttpError(400, f"{at}.tool_use_id: is required",
                                    param=f"{at}.tool_use_id")
                results.append({"role": "tool", "tool_call_id": b.tool_use_id,
                                "content": _text(b.content, f"{at}.content")})
            else:
                raise HttpError(400, f"{at}: {b.type!r} blocks are not supported in "
                                f"{m.role} messages", param=f"{at}.type")
        # A user turn's tool results answer the previous assistant turn's calls: they
        # come first, as tool messages, then any text the user added.
        out.extend(results)
        if m.role == "assistant":
            msg: Message = {"role": "assistant", "content": "".join(texts)}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif texts or not results:
            out.append({"role": "user", "content": "".join(texts)})
    return out


def to_tools(tools: list[ToolParam] | None, choice: ToolChoice | None,
             thinking: ThinkingConfig | None) -> tuple[list[Message] | None, bool]:
    """(tools for the template, whether to parse tool calls); refuses what we can't do."""
    if thinking is not None and thinking.type != "disabled":
        raise HttpError(400, "thinking: extended thinking is not supported by this server",
                        param="thinking")
    for i, t in enumerate(tools or []):
        if t.type not in (None, "custom"):
            raise HttpError(400, f"tools[{i}].type: server tool {t.type!r} is not supported",
                            param=f"tools[{i}].type")
    if choice is not None and choice.disable_parallel_tool_use and \
            choice.type not in ("any", "tool"):
        # A forced choice is decoded as exactly one call; a free one cannot be limited.
        raise HttpError(400, "tool_choice.disable_parallel_tool_use: supported only with "
                        "type 'any' or 'tool'", param="tool_choice.disable_parallel_tool_use")
    if choice is not None and choice.type == "none":
        return None, False
    defs = [{"type": "function", "function": {
        "name": t.name, **({"description": t.description} if t.description else {}),
        "parameters": t.input_schema}} for t in tools or []]
    return defs or None, True


def tool_input(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as `tool_use.input`; a cut call's partial JSON is read as
    far as it goes (what the anthropic client itself builds from a streamed one)."""
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        try:
            value = from_json(arguments, allow_partial=True) if arguments else {}
        except ValueError:
            value = {}
    return value if isinstance(value, dict) else {}


def content_blocks(content: str | None, calls: list[Message]) -> list[dict[str, Any]]:
    """A reply as content blocks: its text (at least one, maybe empty, text block when
    there is no call), then a `tool_use` block per call."""
    blocks: list[dict[str, Any]] = []
    if content or not calls:
        blocks.append({"type": "text", "text": content or ""})
    for c in calls:
        blocks.append({"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                       "input": tool_input(c["function"]["arguments"])})
    return blocks
