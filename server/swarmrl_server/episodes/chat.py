"""Chat messages in, prompt token ids out; completion text in, assistant message out.

Messages are OpenAI-shaped dicts (role, content, tool_calls, tool_call_id, name);
both the gRPC servicer and the OpenAI shim convert to this form. The chat template
is applied once, on the server, with the model's own tokenizer.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable
from typing import Any, TypeAlias

from swarmrl_server.engine.text import encode_text
from swarmrl_server.errors import invalid

Message = dict[str, Any]

Json: TypeAlias = None | bool | int | float | str | list["Json"] | dict[str, "Json"]
"""A JSON value, as `json.loads` returns it."""

Annotations = dict[str, Json]
"""What a door keeps with a chat call's record (`GenerateCall.annotations`)."""

Tool = dict[str, Json]
"""A tool the model may be shown, OpenAI-shaped ({"type": "function", "function": ...})."""

ROLES = ("system", "user", "assistant", "tool")
ROLE_ALIASES = {"developer": "system"}
"""Wire roles the chat templates know by another name: OpenAI's "developer" (o1 and
later) is the newer name of "system"."""
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"


def make_message(
    role: str,
    content: str | None,
    *,
    tool_calls: Iterable[tuple[str, str, str]] = (),
    tool_call_id: str = "",
    name: str = "",
) -> Message:
    """The domain's OpenAI-shaped message; tool_calls are (id, function name, JSON arguments)."""
    msg: Message = {"role": chat_role(role), "content": content}
    calls = [
        {"id": i, "type": "function", "function": {"name": n, "arguments": a or "{}"}}
        for i, n, a in tool_calls
    ]
    if calls:
        msg["tool_calls"] = calls
    if tool_call_id:
        msg["tool_call_id"] = tool_call_id
    if name:
        msg["name"] = name
    return msg


def chat_role(role: str) -> str:
    """A wire role as the chat template knows it (see `ROLE_ALIASES`)."""
    return ROLE_ALIASES.get(role, role)


def validate_messages(messages: list[Message], field: str) -> None:
    """Rejects malformed conversations with INVALID_ARGUMENT naming the message."""
    if not messages:
        raise invalid(field, "at least one message is required")
    for i, m in enumerate(messages):
        where = f"{field}[{i}]"
        role = m.get("role")
        if role not in ROLES:
            raise invalid(f"{where}.role", f"must be one of {', '.join(ROLES)}; got {role!r}")
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            raise invalid(f"{where}.content", "must be a string")
        if role == "tool" and not m.get("tool_call_id"):
            raise invalid(f"{where}.tool_call_id", "is required for tool messages")
        if role != "assistant" and m.get("tool_calls"):
            raise invalid(f"{where}.tool_calls", "only assistant messages may carry tool calls")
        for j, call in enumerate(m.get("tool_calls") or []):
            fn = call.get("function") or {}
            if not fn.get("name"):
                raise invalid(f"{where}.tool_calls[{j}].function.name", "must not be empty")
            try:
                json.loads(fn.get("arguments") or "{}")
            except json.JSONDecodeError:
                raise invalid(
                    f"{where}.tool_calls[{j}].function.arguments", "must be a JSON object"
                ) from None


def template_messages(messages: list[Message]) -> list[Message]:
    """Shapes messages the way HF chat templates expect (tool call arguments as objects)."""
    out: list[Message] = []
    for m in messages:
        m2: Message = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("tool_calls"):
            m2["tool_calls"] = [
                {
                    "id": c.get("id", ""),
                    "type": "function",
                    "function": {
                        "name": c["function"]["name"],
                        "arguments": json.loads(c["function"].get("arguments") or "{}"),
                    },
                }
                for c in m["tool_calls"]
            ]
        if m.get("tool_call_id"):
            m2["tool_call_id"] = m["tool_call_id"]
        if m.get("name"):
            m2["name"] = m["name"]
        out.append(m2)
    return out


def render_text(
    tokenizer: Any, messages: list[Message], tools: list[Message] | None, *, generation_prompt: bool
) -> str:
    """The chat template's text for `messages` (the template is applied exactly once per call)."""
    text = tokenizer.apply_chat_template(
        template_messages(messages),
        tools=tools or None,
        add_generation_prompt=generation_prompt,
        tokenize=False,
    )
    assert isinstance(text, str)
    return text


def encode(tokenizer: Any, text: str) -> list[int]:
    """Token ids of rendered text; special tokens in it are already spelled out."""
    return encode_text(tokenizer, text)


class ReplyParser:
    """Incremental `parse_reply`: feed completion text as it streams, get content deltas
    and finished tool calls, with exactly the result `parse_reply` gives for the whole text
    (however the text is split).

    The tool-call format is the one the chat template documents to the model (Hermes /
    Qwen2.5): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`. While text may
    be part of such a block it is held back; when the block closes it becomes a tool
    call, or, when its body is not a JSON object with a string "name" (and object
    arguments), plain content again: the model's malformed output is data for training,
    not an error for the client.

    Content rule (what lets streaming and whole-text parsing agree): content is the text
    minus each valid block and the whitespace right before it, and minus whitespace that
    ends the text right after a valid block. Text without valid blocks is returned
    exactly as generated, so a client that sends the reply back lets the next turn
    extend this call's exact tokens.
    """

    def __init__(self) -> None:
        self._buf = ""
        self._after_block = False  # nothing but whitespace since the last valid block
        self.calls: list[Message] = []
        self._content: list[str] = []

    def feed(self, text: str) -> tuple[str, list[Message]]:
        """Adds text; returns (content released now, tool calls completed now)."""
        self._buf += text
        out: list[str] = []
        calls: list[Message] = []

        def release(piece: str) -> None:
            if piece:
                out.append(piece)
                self._after_block = False

        while True:
            at = self._buf.find(TOOL_CALL_OPEN)
            if at < 0:
                keep = _held_tail(self._buf)
                release(self._buf[: len(self._buf) - keep])
                self._buf = self._buf[len(self._buf) - keep:]
                break
            end = self._buf.find(TOOL_CALL_CLOSE, at)
            if end < 0:
                # A block is open: release what precedes it but its trailing whitespace,
                # which goes if the block turns out to be a valid call.
                before = self._buf[:at]
                cut = len(before.rstrip())
                release(before[:cut])
                self._buf = self._buf[cut:]
                break
            block_end = end + len(TOOL_CALL_CLOSE)
            call = _tool_call(self._buf[at + len(TOOL_CALL_OPEN): end])
            if call is None:
                release(self._buf[:block_end])
            else:
                release(self._buf[:at].rstrip())
                calls.append(call)
                self._after_block = True
            self._buf = self._buf[block_end:]
        released = "".join(out)
        self._content.append(released)
        self.calls.extend(calls)
        return released, calls

    def finish(self) -> str:
        """Flushes what was held back (an unclosed block, trailing whitespace)."""
        held, self._buf = self._buf, ""
        released = "" if self._after_block and not held.strip() else held
        self._content.append(released)
        return released

    @property
    def content(self) -> str:
        return "".join(self._content)

    def message(self) -> Message:
        """The assistant message for everything fed so far (call after `finish`)."""
        if not self.calls:
            return {"role": "assistant", "content": self.content}
        return {
            "role": "assistant", "content": self.content or None, "tool_calls": list(self.calls)
        }


def _held_tail(text: str) -> int:
    """How many trailing chars might still become part of a block (or its lead-in)."""
    n = 0
    for k in range(min(len(text), len(TOOL_CALL_OPEN) - 1), 0, -1):
        if TOOL_CALL_OPEN.startswith(text[-k:]):
            n = k
            break
    body = text[: len(text) - n]
    return n + (len(body) - len(body.rstrip()))


def _tool_call(body: str) -> Message | None:
    try:
        parsed = json.loads(body.strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str):
        return None
    args = parsed.get("arguments", {})
    if isinstance(args, str):  # some models emit arguments as an encoded JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": parsed["name"], "arguments": json.dumps(args)},
    }


_CUT_CALL = re.compile(
    r'\s*' + re.escape(TOOL_CALL_OPEN) + r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")'
    r'\s*,\s*"arguments"\s*:\s*(.*)', re.DOTALL)


def cut_tool_call(text: str, call_id: str, name: str = "") -> Message | None:
    """The tool call that `text` began but did not close (generation was cut), with its
    arguments as the partial JSON generated so far; None when `text` is not one open
    `<tool_call>` block. `name` is the function's when the cut fell before the text
    named it (a named forced choice knows it). Its id is derived from `call_id`, so it
    is the same each time the call is shown (a retried request, a stored response)."""
    if TOOL_CALL_CLOSE in text:
        return None
    m = _CUT_CALL.fullmatch(text)
    if m is None:
        stripped = text.strip()
        if not stripped or not TOOL_CALL_OPEN.startswith(stripped[:len(TOOL_CALL_OPEN)]):
            return None
        arguments = ""  # cut before the name was complete
    else:
        name, arguments = json.loads(m.group(1)), _partial_arguments(m.group(2))
    return {
        "id": "call_" + call_id.removeprefix("call-")[:24],
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _partial_arguments(text: str) -> str:
    """The arguments' JSON as far as it went, without the call object's own closing brace
    and the start of the close tag when the cut fell after them."""
    head = text.rstrip()
    for k in range(len(TOOL_CALL_CLOSE), 0, -1):
        if head.endswith(TOOL_CALL_CLOSE[:k]):
            head = head[:-k].rstrip()
            break
    if head.endswith("}"):
        try:
            json.loads(head[:-1])
            return head[:-1]
        except json.JSONDecodeError:
            pass
    return text


def parse_reply(text: str, finish_reason: str) -> tuple[Message, str]:
    """Turns completion text into an assistant message, parsing tool-call blocks
    (see `ReplyParser` for the format and the content rule).

    Returns the message and the finish reason, which becomes "tool_calls" when the
    reply calls tools.
    """
    parser = ReplyParser()
    parser.feed(text)
    parser.finish()
    message = parser.message()
    if message.get("tool_calls") and finish_reason == "stop":
        return message, "tool_calls"
    return message, finish_reason
