"""Proto messages ↔ the domain's plain types (OpenAI-shaped message dicts, records)."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import timestamp_pb2

from swarmrl_proto.v1 import episode_service_pb2 as ep_pb
from swarmrl_proto.v1 import types_pb2 as t_pb
from swarmrl_server.episodes.chat import Message, make_message
from swarmrl_server.episodes.resolve import SamplingRequest
from swarmrl_server.errors import invalid
from swarmrl_server.hosting import ModelHost
from swarmrl_server.store.records import CallRecord, EpisodeRecord, EpisodeState

ROLE_NAMES = {
    t_pb.ROLE_SYSTEM: "system",
    t_pb.ROLE_USER: "user",
    t_pb.ROLE_ASSISTANT: "assistant",
    t_pb.ROLE_TOOL: "tool",
}
ROLE_ENUMS = {v: k for k, v in ROLE_NAMES.items()}
FINISH_ENUMS = {
    "stop": t_pb.FINISH_REASON_STOP,
    "length": t_pb.FINISH_REASON_LENGTH,
    "tool_calls": t_pb.FINISH_REASON_TOOL_CALLS,
    "abort": t_pb.FINISH_REASON_ABORT,
}
STATE_ENUMS = {
    EpisodeState.OPEN: t_pb.EPISODE_STATE_OPEN,
    EpisodeState.ENDED: t_pb.EPISODE_STATE_ENDED,
    EpisodeState.ABORTED: t_pb.EPISODE_STATE_ABORTED,
}


def messages_from_proto(messages: Any, field: str) -> list[Message]:
    out: list[Message] = []
    for i, m in enumerate(messages):
        if m.role not in ROLE_NAMES:
            raise invalid(f"{field}[{i}].role", "must be set (ROLE_SYSTEM, ROLE_USER, ...)")
        msg = make_message(
            ROLE_NAMES[m.role], m.content,
            tool_calls=[(c.id, c.name, c.arguments_json) for c in m.tool_calls],
            tool_call_id=m.tool_call_id, name=m.name,
        )
        out.append(msg)
    return out


def message_to_proto(m: Message) -> t_pb.ChatMessage:
    return t_pb.ChatMessage(
        role=ROLE_ENUMS.get(m.get("role", ""), t_pb.ROLE_UNSPECIFIED),
        content=m.get("content") or "",
        tool_calls=[
            t_pb.ToolCall(
                id=c.get("id", ""), name=c["function"]["name"],
                arguments_json=c["function"].get("arguments") or "{}",
            )
            for c in m.get("tool_calls") or []
        ],
        tool_call_id=m.get("tool_call_id") or "",
        name=m.get("name") or "",
    )


def tools_from_proto(tools: Any) -> list[Message] | None:
    out = []
    for i, t in enumerate(tools):
        if not t.name:
            raise invalid(f"input.chat.tools[{i}].name", "must not be empty")
        try:
            params = json.loads(t.parameters_json) if t.parameters_json else {"type": "object"}
        except json.JSONDecodeError:
            raise invalid(f"input.chat.tools[{i}].parameters_json", "must be JSON") from None
        out.append({"type": "function", "function": {
            "name": t.name, "description": t.description, "parameters": params}})
    return out or None


def sampling_from_proto(s: t_pb.SamplingParams) -> SamplingRequest:
    return SamplingRequest(
        temperature=s.temperature if s.HasField("temperature") else None,
        top_p=s.top_p if s.HasField("top_p") else None,
        max_tokens=s.max_tokens if s.HasField("max_tokens") else None,
        stop=tuple(s.stop),
        stop_token_ids=tuple(s.stop_token_ids),
        seed=s.seed if s.HasField("seed") else None,
        top_logprobs=s.top_logprobs,
    )


def _timestamp(t: float | None) -> timestamp_pb2.Timestamp | None:
    if t is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(t * 1e9))
    return ts


def timestamp_of(t: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(t * 1e9))
    return ts


def version_spans_to_proto(c: CallRecord) -> list[ep_pb.VersionSpan]:
    return [ep_pb.VersionSpan(policy_version=v, start=a, end=b) for v, a, b in c.spans()]


def call_to_proto(c: CallRecord) -> ep_pb.CallRecord:
    msg = ep_pb.CallRecord(
        call_id=c.call_id, model=c.model, prompt_ids=c.prompt_ids,
        completion_ids=c.completion_ids, logprobs=c.logprobs, policy_version=c.policy_version,
        finish_reason=FINISH_ENUMS.get(c.finish_reason, t_pb.FINISH_REASON_UNSPECIFIED),
        parent_call_id=c.parent_call_id, version_spans=version_spans_to_proto(c),
    )
    if c.reward is not None:
        msg.reward = c.reward
    return msg


def episode_to_proto(e: EpisodeRecord) -> ep_pb.Episode:
    msg = ep_pb.Episode(
        episode_id=e.episode_id, state=STATE_ENUMS[e.state], task_id=e.task_id,
        group_id=e.group_id, agent_version=e.agent_version, models=e.models,
        num_calls=e.num_calls, calls=[call_to_proto(c) for c in e.calls],
        start_time=_timestamp(e.start_time), end_time=_timestamp(e.end_time),
        abort_reason=e.abort_reason, labels=e.labels, model_rewards=e.model_rewards,
    )
    if e.reward is not None:
        msg.reward = e.reward
    return msg


def model_to_proto(h: ModelHost) -> t_pb.ModelInfo:
    """`group_size` is the trainer's (0 when the model is not trained): an attached client
    checks its own groups against it."""
    return t_pb.ModelInfo(
        name=h.name, policy_version=h.engine.policy_version, max_model_len=h.engine.max_model_len,
        vocab_size=h.engine.vocab_size, trainable=h.trainable, source=h.source,
        group_size=h.trainer.config.group_size if h.trainer is not None else 0,
    )
