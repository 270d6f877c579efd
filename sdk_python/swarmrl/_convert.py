"""Translation between the SDK's public values and the wire messages.

This is the only module besides the transport that touches `swarmrl_proto`; the
public types never carry a protobuf message.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from google.protobuf import json_format
from google.protobuf.timestamp_pb2 import Timestamp

from swarmrl._errors import InvalidArgumentError
from swarmrl._sampling import SamplingParams
from swarmrl._types import (
    AgentVersionInfo,
    CallRecord,
    ChatMessage,
    ClientInfo,
    ClientList,
    Completion,
    Draining,
    EpisodeInfo,
    EpisodeState,
    Event,
    FinishReason,
    GenerationChunk,
    ModelInfo,
    Pausing,
    PolicyVersionChanged,
    Resumed,
    ServerStatus,
    Tool,
    TrainingHold,
    Usage,
)
from swarmrl_proto.v1 import admin_service_pb2 as admin_pb2
from swarmrl_proto.v1 import episode_service_pb2 as episode_pb2
from swarmrl_proto.v1 import session_service_pb2 as session_pb2
from swarmrl_proto.v1 import types_pb2

ROLES: dict[str, types_pb2.Role.ValueType] = {
    "system": types_pb2.ROLE_SYSTEM,
    "user": types_pb2.ROLE_USER,
    "assistant": types_pb2.ROLE_ASSISTANT,
    "tool": types_pb2.ROLE_TOOL,
}
ROLE_NAMES: dict[types_pb2.Role.ValueType, str] = {
    types_pb2.ROLE_SYSTEM: "system",
    types_pb2.ROLE_USER: "user",
    types_pb2.ROLE_ASSISTANT: "assistant",
    types_pb2.ROLE_TOOL: "tool",
}
FINISH_REASONS: dict[types_pb2.FinishReason.ValueType, FinishReason] = {
    types_pb2.FINISH_REASON_STOP: "stop",
    types_pb2.FINISH_REASON_LENGTH: "length",
    types_pb2.FINISH_REASON_TOOL_CALLS: "tool_calls",
    types_pb2.FINISH_REASON_ABORT: "abort",
}
_EPISODE_STATES: dict[types_pb2.EpisodeState.ValueType, EpisodeState] = {
    types_pb2.EPISODE_STATE_OPEN: "open",
    types_pb2.EPISODE_STATE_ENDED: "ended",
    types_pb2.EPISODE_STATE_ABORTED: "aborted",
}
_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})


def _invalid(field: str, message: str) -> InvalidArgumentError:
    # Named like the server names fields, so client- and server-side checks read alike.
    return InvalidArgumentError(f"{field}: {message}", reason="INVALID_FIELD", field=field)


def _text_content(content: Any, field: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts: list[str] = []
        for i, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text":
                raise _invalid(f"{field}[{i}]", "only text content parts are supported")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise _invalid(field, f"expected a string or a list of text parts, got {type(content)}")


def _tool_call_to_proto(call: Any, field: str) -> types_pb2.ToolCall:
    if not isinstance(call, Mapping):
        raise _invalid(field, "expected an OpenAI-style tool call object")
    function = call.get("function")
    if not isinstance(function, Mapping) or not function.get("name"):
        raise _invalid(f"{field}.function", "expected {'name': ..., 'arguments': ...}")
    arguments = function.get("arguments", "{}")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return types_pb2.ToolCall(
        id=str(call.get("id", "")), name=str(function["name"]), arguments_json=arguments
    )


def message_to_proto(message: ChatMessage, field: str) -> types_pb2.ChatMessage:
    """One OpenAI-style message; unknown keys with a value are rejected, not dropped."""
    if not isinstance(message, Mapping):
        raise _invalid(field, "expected a mapping with 'role' and 'content'")
    for key, value in message.items():
        if key not in _MESSAGE_KEYS and value not in (None, "", [], {}):
            raise _invalid(f"{field}.{key}", "unsupported message field")
    role = message.get("role")
    if role not in ROLES:
        raise _invalid(f"{field}.role", f"expected one of {sorted(ROLES)}, got {role!r}")
    tool_calls = message.get("tool_calls") or []
    return types_pb2.ChatMessage(
        role=ROLES[role],
        content=_text_content(message.get("content"), f"{field}.content"),
        tool_calls=[
            _tool_call_to_proto(call, f"{field}.tool_calls[{i}]")
            for i, call in enumerate(tool_calls)
        ],
        tool_call_id=str(message.get("tool_call_id") or ""),
        name=str(message.get("name") or ""),
    )


def tool_to_proto(tool: Tool, field: str) -> types_pb2.Tool:
    """One OpenAI-style function tool."""
    function = tool.get("function") if isinstance(tool, Mapping) else None
    if not isinstance(function, Mapping) or tool.get("type", "function") != "function":
        raise _invalid(field, "expected {'type': 'function', 'function': {...}}")
    if not function.get("name"):
        raise _invalid(f"{field}.function.name", "a tool needs a name")
    return types_pb2.Tool(
        name=str(function["name"]),
        description=str(function.get("description") or ""),
        parameters_json=json.dumps(function.get("parameters") or {"type": "object"}),
    )


def chat_input(
    messages: Sequence[ChatMessage], tools: Sequence[Tool] | None
) -> episode_pb2.ChatInput:
    """The chat prompt of a Generate request."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise _invalid("chat.messages", "expected a list of messages")
    return episode_pb2.ChatInput(
        messages=[message_to_proto(m, f"chat.messages[{i}]") for i, m in enumerate(messages)],
        tools=[tool_to_proto(t, f"chat.tools[{i}]") for i, t in enumerate(tools or ())],
    )


def sampling(p: SamplingParams) -> types_pb2.SamplingParams:
    """Sampling parameters; None leaves a field unset so the server's default applies."""
    params = types_pb2.SamplingParams(
        stop=[p.stop] if isinstance(p.stop, str) else list(p.stop or ()),
        stop_token_ids=list(p.stop_token_ids or ()),
        top_logprobs=p.top_logprobs,
    )
    for name in ("temperature", "top_p", "max_tokens", "seed"):
        value = getattr(p, name)
        if value is not None:
            setattr(params, name, value)
    return params


def finish_reason(value: types_pb2.FinishReason.ValueType) -> FinishReason:
    """The public name of a finish reason (an unset one reads as "abort")."""
    return FINISH_REASONS.get(value, "abort")


def message_from_proto(message: types_pb2.ChatMessage, text: str) -> dict[str, Any]:
    """The assistant's reply as an OpenAI-style message dict."""
    out: dict[str, Any] = {"role": "assistant", "content": message.content or text}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments_json},
            }
            for call in message.tool_calls
        ]
    return out


def chunk_from_proto(chunk: episode_pb2.GenerateChunk) -> GenerationChunk:
    return GenerationChunk(
        token_ids=list(chunk.token_ids), logprobs=list(chunk.logprobs), text=chunk.text
    )


def completion_from_proto(result: episode_pb2.GenerateResult) -> Completion:
    return Completion(
        call_id=result.call_id,
        text=result.text,
        message=message_from_proto(result.message, result.text),
        prompt_ids=list(result.prompt_ids),
        completion_ids=list(result.completion_ids),
        logprobs=list(result.logprobs),
        top_logprobs=[
            {entry.token_id: entry.logprob for entry in position.entries}
            for position in result.top_logprobs
        ],
        finish_reason=finish_reason(result.finish_reason),
        policy_version=result.policy_version,
        model=result.model,
        usage=Usage(
            prompt_tokens=result.usage.prompt_tokens,
            completion_tokens=result.usage.completion_tokens,
        ),
        version_spans=spans_from_proto(result.version_spans),
    )


def spans_from_proto(spans: Iterable[episode_pb2.VersionSpan]) -> tuple[tuple[int, int, int], ...]:
    return tuple((s.policy_version, s.start, s.end) for s in spans)


def model_from_proto(model: types_pb2.ModelInfo) -> ModelInfo:
    return ModelInfo(
        name=model.name,
        policy_version=model.policy_version,
        max_model_len=model.max_model_len,
        vocab_size=model.vocab_size,
        trainable=model.trainable,
        source=model.source,
        group_size=model.group_size,
    )


def _time(ts: Timestamp, present: bool) -> datetime.datetime | None:
    return ts.ToDatetime(tzinfo=datetime.timezone.utc) if present else None


def call_from_proto(call: episode_pb2.CallRecord) -> CallRecord:
    return CallRecord(
        call_id=call.call_id,
        model=call.model,
        prompt_ids=list(call.prompt_ids),
        completion_ids=list(call.completion_ids),
        logprobs=list(call.logprobs),
        policy_version=call.policy_version,
        finish_reason=finish_reason(call.finish_reason),
        reward=call.reward if call.HasField("reward") else None,
        parent_call_id=call.parent_call_id or None,
        version_spans=spans_from_proto(call.version_spans),
    )


def episode_from_proto(episode: episode_pb2.Episode) -> EpisodeInfo:
    return EpisodeInfo(
        episode_id=episode.episode_id,
        state=_EPISODE_STATES.get(episode.state, "open"),
        task_id=episode.task_id,
        group_id=episode.group_id,
        agent_version=episode.agent_version,
        models=list(episode.models),
        reward=episode.reward if episode.HasField("reward") else None,
        num_calls=episode.num_calls,
        calls=[call_from_proto(call) for call in episode.calls],
        start_time=_time(episode.start_time, episode.HasField("start_time")),
        end_time=_time(episode.end_time, episode.HasField("end_time")),
        abort_reason=episode.abort_reason,
        labels=dict(episode.labels),
        model_rewards=dict(episode.model_rewards),
    )


def status_from_proto(status: admin_pb2.GetStatusResponse) -> ServerStatus:
    return ServerStatus(
        server_instance=status.server_instance,
        sessions=status.sessions,
        open_episodes=status.open_episodes,
        ended_episodes=status.ended_episodes,
        aborted_episodes=status.aborted_episodes,
        paused=status.paused,
        models=[model_from_proto(m) for m in status.models],
        last_event_sequence=status.last_event_sequence,
        holds=[hold_from_proto(h) for h in status.holds],
    )


def hold_from_proto(hold: admin_pb2.TrainingHold) -> TrainingHold:
    return TrainingHold(
        model=hold.model, holder=hold.holder, reason=hold.reason, session_id=hold.session_id,
        hold_time=_time(hold.hold_time, hold.HasField("hold_time")),
        age=hold.age.ToTimedelta().total_seconds(),
        lease_expire_time=_time(hold.lease_expire_time, hold.HasField("lease_expire_time")),
    )


def clients_from_proto(response: admin_pb2.ListClientsResponse) -> ClientList:
    return ClientList(
        clients=[
            ClientInfo(
                session_id=c.session_id, client_name=c.client_name,
                agent_version=c.agent_version,
                episode_agent_versions=list(c.episode_agent_versions), tasks=list(c.tasks),
                models=list(c.models), open_episodes=c.open_episodes,
                ended_episodes=c.ended_episodes, aborted_episodes=c.aborted_episodes,
                lease_expire_time=_time(c.lease_expire_time, c.HasField("lease_expire_time")),
            )
            for c in response.clients
        ],
        agent_versions=[
            AgentVersionInfo(
                agent_version=v.agent_version, open_episodes=v.open_episodes,
                ended_episodes=v.ended_episodes, aborted_episodes=v.aborted_episodes,
                consumed_episodes=v.consumed_episodes, mean_reward=v.mean_reward,
            )
            for v in response.agent_versions
        ],
    )


def event_from_proto(event: session_pb2.WatchEventsResponse) -> Event | None:
    """The public event, or None for an event kind this SDK version does not know."""
    seq = event.sequence
    kind = event.WhichOneof("event")
    if kind == "policy_version_changed":
        changed = event.policy_version_changed
        return PolicyVersionChanged(seq, changed.model, changed.policy_version)
    if kind == "pausing":
        return Pausing(seq, event.pausing.reason)
    if kind == "resumed":
        return Resumed(seq, event.resumed.reason)
    if kind == "draining":
        return Draining(seq, event.draining.grace.ToTimedelta().total_seconds())
    return None


def live_from_proto(live: admin_pb2.LiveSnapshot) -> dict[str, Any]:
    """A LiveSnapshot in proto3's JSON mapping, as GET /swarmrl/live serves it (field names
    as in the protos, defaults written, unset optional fields left out)."""
    return json_format.MessageToDict(
        live, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
