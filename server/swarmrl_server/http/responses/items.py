"""Responses API items <-> the registry's chat messages.

Input items become the OpenAI-shaped chat messages every other door produces, so a
Responses conversation renders, extends (invariant 1) and parses exactly like a
chat-completions one: messages keep their role ("developer" is "system", as in chat
completions), `function_call` items are the assistant's `tool_calls`, and
`function_call_output` items are `tool` messages. One assistant turn that the server
returned as several output items (a `message`, then `function_call`s) is one assistant
message again, so a client that passes the output back verbatim gets a prompt that
extends this call's exact token ids. `reasoning` items are dropped: this server never
produces one, and one from another provider has nothing the chat template can show.
"""

from __future__ import annotations

import json
from typing import Any

from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.episodes.chat import Message, chat_role
from swarmrl_server.episodes.render import chat_of
from swarmrl_server.http.errors import HttpError
from swarmrl_server.http.generation import TokenText, chat_logprobs
from swarmrl_server.http.responses.protocol import ContentPart, InputItem, ResponseSettings
from swarmrl_server.http.serving import cut_call, reply_of
from swarmrl_server.store.records import CallRecord

TEXT_PARTS = ("input_text", "output_text", "text")


def _text(content: str | list[ContentPart] | None, where: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    for j, part in enumerate(content):
        if part.type not in TEXT_PARTS or part.text is None:
            raise HttpError(400, f"{where}[{j}].type: only text parts are supported; got "
                            f"{part.type!r}", param=f"{where}[{j}].type")
    # "" as Anthropic text blocks join: a reply sent back as its parts is the same turn.
    return "".join(p.text or "" for p in content)


def _required(value: str | None, at: str) -> str:
    if not value:
        raise HttpError(400, f"{at}: required", param=at)
    return value


def to_messages(items: str | list[InputItem] | None) -> list[Message]:
    """`input` (a string or a list of items) as chat messages."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    out: list[Message] = []
    for i, item in enumerate(items or []):
        at = f"input[{i}]"
        if item.type == "message":
            role = _required(item.role, f"{at}.role")
            out.append({"role": chat_role(role),
                        "content": _text(item.content, f"{at}.content")})
        elif item.type == "function_call":
            arguments = item.arguments or "{}"
            try:
                parsed = json.loads(arguments)
            except json.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict):
                raise HttpError(400, f"{at}.arguments: must be a JSON object",
                                param=f"{at}.arguments")
            call = {"id": _required(item.call_id, f"{at}.call_id"), "type": "function",
                    "function": {"name": _required(item.name, f"{at}.name"),
                                 "arguments": arguments}}
            if out and out[-1]["role"] == "assistant":  # the same turn's text or calls
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif item.type == "function_call_output":
            out.append({"role": "tool", "tool_call_id": _required(item.call_id, f"{at}.call_id"),
                        "content": _text(item.output, f"{at}.output")})
        elif item.type != "reasoning":
            raise HttpError(400, f"{at}.type: {item.type!r} items are not supported (messages, "
                            "function_call, function_call_output and reasoning are)",
                            param=f"{at}.type")
    return out


def to_tools(settings: ResponseSettings) -> list[Message] | None:
    """Function tools in the chat template's (chat completions') shape; None when the
    tools are hidden from the model (tool_choice "none") or there are none."""
    if not settings.parse_tools or not settings.tools:
        return None
    return [{"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
            for t in settings.tools]


def item_id(prefix: str, response_id: str) -> str:
    return f"{prefix}_{response_id.removeprefix('resp_')}"


def message_item(response_id: str, text: str, status: str,
                 logprobs: list[Any] | None) -> dict[str, Any]:
    return {"type": "message", "id": item_id("msg", response_id), "role": "assistant",
            "status": status, "content": [{"type": "output_text", "text": text,
                                           "annotations": [], "logprobs": logprobs or []}]}


def function_call_item(call: Message, status: str) -> dict[str, Any]:
    """A tool call as a `function_call` item; `call_id` is the id recorded in the call's
    reply (what the episode holds), and the item id is derived from it."""
    fn = call["function"]
    return {"type": "function_call", "id": f"fc_{call['id'].removeprefix('call_')}",
            "call_id": call["id"], "name": fn["name"], "arguments": fn["arguments"],
            "status": status}


def output_items(settings: ResponseSettings, result: GenerationResult,
                 tt: TokenText | None) -> list[dict[str, Any]]:
    """The `output` of a finished response: a message when there is text or nothing else,
    then one `function_call` item per tool call (the order a stream emits them in)."""
    text, calls = reply_of(settings.parse_tools, settings.forced_tool, result,
                           settings.forced_name)
    status = "incomplete" if result.finish_reason == "length" else "completed"
    items = []
    if text or not calls:
        c = result.call
        logprobs = chat_logprobs(tt, c.completion_ids, c.logprobs, c.top_logprobs,
                                 settings.top_logprobs or 0)["content"] if tt else None
        items.append(message_item(settings.id, text or "", status, logprobs))
    # A forced call that max_output_tokens cut is an incomplete item, never text.
    status = "incomplete" if cut_call(settings.forced_tool, result) else "completed"
    items += [function_call_item(call, status) for call in calls]
    return items


def conversation_of(settings: ResponseSettings, call: CallRecord) -> list[Message]:
    """A stored response's conversation for `previous_response_id`: its input (without its
    own `instructions`, which the API does not carry over) and its reply, as recorded."""
    chat = chat_of(call) or {}
    messages: list[Message] = chat["messages"]
    if settings.instructions:
        messages = messages[1:]
    reply = chat["reply"] if settings.parse_tools else {"role": "assistant", "content": call.text}
    return [*messages, reply]
