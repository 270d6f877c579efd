"""Rendering a chat call's prompt so that multi-turn episodes stay token-exact.

For the first call of an episode the chat template renders the messages. For a
later call, when the new messages are an earlier call's messages + the reply the
server returned for it + new messages, the prompt is that earlier call's exact
prompt ids + completion ids + only the newly rendered suffix. The model then sees
exactly the tokens it generated (never a re-tokenization of their text), and
timeline merging later finds an exact token prefix. When the messages do not
extend any earlier call (history edited, compacted, tools changed, or a template
that rewrites history), the messages are rendered afresh and the fork's cause is
recorded.

Cost per turn: the template renders the new messages once (their text is kept on the
call for the next turn's bridge), only the bridge is tokenized, and the earlier call's
chat is read from memory, not parsed from JSON (see `CallRecord.chat`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from swarmrl_server.episodes.chat import Message, encode, render_text
from swarmrl_server.store.records import CallRecord


@dataclass(frozen=True)
class Rendered:
    prompt_ids: list[int]
    extended_call_id: str = ""
    """The call whose exact ids start this prompt ("" when rendered afresh)."""
    fork_reason: str = ""
    """Why no earlier chat call could be extended ("" when one was, or on the first call)."""
    text: str = ""
    """The template's text for the messages (with the generation prompt)."""


def chat_of(call: CallRecord) -> dict[str, Any] | None:
    """The call's chat ({"messages", "tools", "reply", "fork_reason"}), parsed once."""
    if call.chat is None and call.chat_json:
        call.chat = json.loads(call.chat_json)
    return call.chat


def _norm_calls(calls: Any) -> list[tuple[str, Any]]:
    out = []
    for c in calls or []:
        fn = c.get("function") or {}
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except json.JSONDecodeError:
            args = fn.get("arguments")
        out.append((fn.get("name", ""), args))
    return out


def _norm(m: Message) -> tuple[Any, ...]:
    """What makes two messages the same turn (tool call ids are client bookkeeping)."""
    return (
        m.get("role"),
        m.get("content") or "",
        _norm_calls(m.get("tool_calls")),
        m.get("tool_call_id") or "",
        m.get("name") or "",
    )


def render_prompt(
    tokenizer: Any,
    messages: list[Message],
    tools: list[Message] | None,
    earlier_calls: Sequence[CallRecord],
    eos_token_ids: Sequence[int],
) -> Rendered:
    """Prompt ids for a chat call, extending the latest earlier call it continues."""
    fork_reason = ""
    full = render_text(tokenizer, messages, tools, generation_prompt=True)
    candidates = [c for c in reversed(earlier_calls) if c.chat_json]
    for call in candidates:
        prev = chat_of(call)
        assert prev is not None
        reason = _extension_mismatch(prev, messages, tools, call.text)
        if reason:
            fork_reason = fork_reason or f"call {call.call_id}: {reason}"
            continue
        prefix = call.rendered_text or render_text(
            tokenizer, prev["messages"], tools, generation_prompt=True)
        bridge = _bridge_text(tokenizer, prefix, full, call, eos_token_ids)
        if bridge is None:
            fork_reason = fork_reason or (
                f"call {call.call_id}: the chat template does not render the longer history "
                "as an extension of the shorter one"
            )
            continue
        return Rendered(
            call.prompt_ids + call.completion_ids + encode(tokenizer, bridge),
            extended_call_id=call.call_id, text=full,
        )
    return Rendered(encode(tokenizer, full), fork_reason=fork_reason, text=full)


def _extension_mismatch(
    prev: dict[str, Any], messages: list[Message], tools: Any, raw_text: str
) -> str:
    """Why `messages` (with `tools`) do not continue the earlier call `prev` ("" if they do).

    The earlier reply may come back as the parsed message the server returned or as
    the raw completion text (what a client that asked for no tool parsing, e.g. with
    tool_choice "none", was given): both are the same tokens.
    """
    prev_messages: list[Message] = prev["messages"]
    k = len(prev_messages)
    if (prev.get("tools") or None) != (tools or None):
        return "tools differ"
    for i in range(min(k, len(messages))):  # an edit is the more telling reason: check first
        if _norm(messages[i]) != _norm(prev_messages[i]):
            return f"message {i} differs"
    if len(messages) <= k:
        return "history is not longer than the earlier call's"
    raw_reply = {"role": "assistant", "content": raw_text}
    if _norm(messages[k]) not in (_norm(prev["reply"]), _norm(raw_reply)):
        return f"message {k} is not the reply the server returned"
    return ""


def _bridge_text(
    tokenizer: Any,
    prefix: str,
    full: str,
    call: CallRecord,
    eos_token_ids: Sequence[int],
) -> str | None:
    """Text that follows the earlier call's completion ids in the new prompt.

    The template renders [earlier prompt][assistant turn][new messages][generation
    prompt]. The assistant turn ends at the end-of-turn token; the bridge is what
    follows it (or the end-of-turn token itself, when the completion was cut short
    and never produced it).
    """
    if not full.startswith(prefix):
        return None
    rest = full[len(prefix):]
    eos_texts = [tokenizer.convert_ids_to_tokens(t) for t in eos_token_ids]
    hits = [(rest.find(t), t) for t in eos_texts if t and rest.find(t) >= 0]
    if not hits:
        return None
    at, eos_text = min(hits)
    ended_with_eos = bool(call.completion_ids) and call.completion_ids[-1] in eos_token_ids
    return rest[at + len(eos_text):] if ended_with_eos else rest[at:]


def extended_parent(prompt_ids: Sequence[int], earlier_calls: Sequence[CallRecord]) -> str:
    """The latest earlier call whose prompt + completion is a token prefix of `prompt_ids`."""
    for call in reversed(earlier_calls):
        n = len(call.prompt_ids) + len(call.completion_ids)
        if n <= len(prompt_ids) and list(prompt_ids[: len(call.prompt_ids)]) == call.prompt_ids \
                and list(prompt_ids[len(call.prompt_ids):n]) == call.completion_ids:
            return call.call_id
    return ""
