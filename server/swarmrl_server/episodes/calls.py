"""A generation call's record and the answer a retry of it gets.

A call is recorded whole once its engine finishes (`call_record`), with the versions
that made its tokens (several when a sync interrupted it); a later request with
the same request_id gets that record back (`recorded_call`, `replay`), never a second
generation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from swarmrl_server.engine.base import GenerationOutput
from swarmrl_server.episodes.chat import Message, parse_reply
from swarmrl_server.episodes.render import chat_of, extended_parent
from swarmrl_server.episodes.resolve import ResolvedRequest
from swarmrl_server.store.records import CallRecord


@dataclass(frozen=True)
class GenerationResult:
    """The last item of a generate stream: the recorded call and the parsed reply."""

    call: CallRecord
    message: Message
    finish_reason: str
    """"stop", "length", "tool_calls" or "abort"."""
    overridden: dict[str, Any] = field(default_factory=dict)
    """Sampling fields the server's policy replaced ({field: value used})."""
    replayed: bool = False



def recorded_call(calls: Sequence[CallRecord], request_id: str) -> CallRecord | None:
    """The call already recorded under `request_id`, if any."""
    if request_id:
        for call in calls:
            if call.request_id == request_id:
                return call
    return None


def replay(call: CallRecord) -> GenerationResult:
    """The answer to a retried call: its record and reply, as first given."""
    chat = chat_of(call)
    message, finish_reason = (
        (chat["reply"], call.finish_reason) if chat else parse_reply(call.text, call.finish_reason)
    )
    return GenerationResult(call, message, finish_reason, replayed=True)


def dumps(value: object) -> str:
    """JSON text of `value`: orjson's (compact, UTF-8; ~10x the stdlib's speed), or the
    stdlib's for what orjson refuses (an integer beyond 64 bits in a tool's schema)."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value)


def call_record(
    call_id: str, episode_id: str, model: str, request: ResolvedRequest,
    output: GenerationOutput, message: Message, finish_reason: str, request_id: str,
    calls_of_model: Sequence[CallRecord],
) -> CallRecord:
    """The record of a finished call (its seq is set when it is stored)."""
    chat_json = ""
    spans = output.spans()  # one span is the default (`CallRecord.spans`): not stored
    if request.chat is not None:
        request.chat["reply"] = message
        chat_json = dumps(request.chat)
    call = CallRecord(
        call_id=call_id, episode_id=episode_id, seq=-1,
        model=model, prompt_ids=list(output.prompt_ids),
        completion_ids=list(output.completion_ids), logprobs=list(output.logprobs),
        policy_version=output.policy_version, finish_reason=finish_reason,
        temperature=request.params.temperature, text=output.text, request_id=request_id,
        parent_call_id=extended_parent(output.prompt_ids, calls_of_model),
        created_at=time.time(), chat_json=chat_json, top_logprobs=output.top_logprobs,
        constrained=request.params.structural_tag is not None, grammar=output.grammar,
        version_spans=spans if len(spans) > 1 else [],
    )
    if request.chat is not None:  # kept in memory for the next turn (see render.py)
        call.chat, call.rendered_text = request.chat, request.rendered_text
    return call
