"""The values the SDK hands back: plain frozen dataclasses, never protobuf messages."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

__all__ = [
    "AgentVersionInfo",
    "CallRecord",
    "ChatMessage",
    "ClientInfo",
    "ClientList",
    "Completion",
    "Draining",
    "EpisodeInfo",
    "EpisodeState",
    "Event",
    "FinishReason",
    "GenerationChunk",
    "ModelInfo",
    "Pausing",
    "PolicyVersionChanged",
    "Resumed",
    "ServerStatus",
    "Tool",
    "TrainingHold",
    "Usage",
]

ChatMessage: TypeAlias = Mapping[str, Any]
"""An OpenAI-style chat message: ``role`` ("system", "user", "assistant" or "tool"),
``content`` (a string, or a list of ``{"type": "text", "text": ...}`` parts), and
optionally ``tool_calls``, ``tool_call_id`` and ``name``."""

Tool: TypeAlias = Mapping[str, Any]
"""An OpenAI-style tool: ``{"type": "function", "function": {"name": ..., "description":
..., "parameters": {...JSON Schema...}}}``."""

FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "abort"]
"""Why a generation stopped: a stop token or string, the token limit, a tool call, or
cut short (client went away or the server is stopping)."""

EpisodeState: TypeAlias = Literal["open", "ended", "aborted"]
"""An episode accepts calls while open; ended episodes are trained, aborted ones never."""


@dataclass(frozen=True)
class Usage:
    """Token counts of one generation."""

    prompt_tokens: int
    """Tokens in the prompt."""
    completion_tokens: int
    """Tokens generated."""

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class GenerationChunk:
    """Tokens that arrived while a completion streams."""

    token_ids: list[int]
    """Token ids generated since the previous chunk."""
    logprobs: list[float]
    """Log probability of each of those tokens under the sampling distribution."""
    text: str
    """Text these tokens add (may be empty while a multi-byte character is incomplete)."""


@dataclass(frozen=True)
class Completion:
    """One recorded model call, exactly as the server stored it."""

    call_id: str
    """Identifier of the recorded call; pass it to `AsyncEpisode.reward` to reward the call."""
    text: str
    """Completion text, without the stop token or stop string."""
    message: dict[str, Any]
    """The reply as an OpenAI-style assistant message (with ``tool_calls`` if any), ready
    to append to the conversation."""
    prompt_ids: list[int]
    """Token ids of the prompt the model saw (the rendered chat template, for chat calls)."""
    completion_ids: list[int]
    """Token ids the model generated, including its stop token."""
    logprobs: list[float]
    """Log probability of each completion token under the sampling distribution."""
    top_logprobs: list[dict[int, float]]
    """Per completion token, the most likely alternatives (token id to log probability,
    best first); empty unless ``top_logprobs`` was requested."""
    finish_reason: FinishReason
    """Why generation stopped."""
    policy_version: int
    """Version of the weights that generated the last token of this call (every token,
    when ``version_spans`` holds one span)."""
    model: str
    """The model that generated the completion."""
    usage: Usage
    """Token counts."""
    version_spans: tuple[tuple[int, int, int], ...] = ()
    """``(policy_version, start, end)``: completion tokens ``[start, end)`` came from that
    version's weights; one span unless the weights changed mid-call."""

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """The OpenAI-style tool calls of `message` (empty when the model called none)."""
        calls: list[dict[str, Any]] = self.message.get("tool_calls") or []
        return calls


@dataclass(frozen=True)
class ModelInfo:
    """A model the server hosts."""

    name: str
    """Name used to address the model."""
    policy_version: int
    """Version of the weights now served; bumped by every optimizer step."""
    max_model_len: int
    """Context length in tokens (prompt plus completion)."""
    vocab_size: int
    """Number of tokens in the vocabulary."""
    trainable: bool
    """Whether the server trains this model on the episodes it records."""
    source: str
    """Where the weights came from (a path or a builder name)."""
    group_size: int = 0
    """Episodes per GRPO group the server's trainer compares (its group_size option); 0
    when the model is not trained, or its trainer groups whatever shares a task and group
    id. A client playing groups of another size would have them cut differently."""


@dataclass(frozen=True)
class CallRecord:
    """One model call recorded in an episode."""

    call_id: str
    """Identifier."""
    model: str
    """The model called."""
    prompt_ids: list[int]
    """Token ids of the prompt."""
    completion_ids: list[int]
    """Token ids generated."""
    logprobs: list[float]
    """Log probability of each generated token."""
    policy_version: int
    """Policy version that generated the call's last token (see ``version_spans``)."""
    finish_reason: FinishReason
    """Why generation stopped."""
    reward: float | None
    """Reward given to this call, if any."""
    parent_call_id: str | None
    """The earlier call whose prompt and completion this call's prompt extends, if any."""
    version_spans: tuple[tuple[int, int, int], ...] = ()
    """``(policy_version, start, end)`` over the completion tokens (as in `Completion`)."""


@dataclass(frozen=True)
class EpisodeInfo:
    """An episode as the server stores it."""

    episode_id: str
    """Identifier."""
    state: EpisodeState
    """Open, ended or aborted."""
    task_id: str
    """Task id given at start."""
    group_id: str
    """Group id (the task id when none was given)."""
    agent_version: str
    """Agent version given at start."""
    models: list[str]
    """Models the episode may call."""
    reward: float | None
    """The episode-level reward, if set."""
    num_calls: int
    """Number of calls recorded."""
    calls: list[CallRecord]
    """The recorded calls (only when asked for with ``include_calls=True``)."""
    start_time: datetime.datetime | None
    """When the episode started (UTC)."""
    end_time: datetime.datetime | None
    """When it ended or was aborted (UTC)."""
    abort_reason: str
    """Why it was aborted, if it was."""
    labels: dict[str, str] = field(default_factory=dict)
    """Labels given at start."""
    model_rewards: dict[str, float] = field(default_factory=dict)
    """Rewards given to single models; the others are trained on `reward`."""


@dataclass(frozen=True)
class TrainingState:
    """A model's policy version and trainer step, as a hold or a restore left them."""

    model: str
    """The model."""
    policy_version: int
    """The version served now (while a hold lasts, the only one)."""
    step: int
    """The trainer's last step (for a restore: the checkpoint's step)."""


@dataclass(frozen=True)
class TrainingHold:
    """A hold of a model's training (`AsyncSwarmClient.hold_training`): a lease, which
    lapses when its holder's session does (or, held without a session, when its own
    lease runs out unrenewed), and training then goes on."""

    model: str
    """The model held."""
    holder: str
    """Who holds."""
    reason: str
    """Why, in words."""
    session_id: str
    """The session the hold lasts with; empty for a hold on a lease of its own."""
    hold_time: datetime.datetime | None
    """When the holder first took it (UTC; holding again keeps it)."""
    age: float
    """Seconds it had been held when the server answered (by the server's clock)."""
    lease_expire_time: datetime.datetime | None
    """When it lapses unless renewed (UTC): its session's lease expiry, or its own."""


@dataclass(frozen=True)
class ServerStatus:
    """What the server reports about itself."""

    server_instance: str
    """Identifier of the server process; it changes when the server restarts."""
    sessions: int
    """Sessions with a live lease."""
    open_episodes: int
    """Episodes open now."""
    ended_episodes: int
    """Episodes ended since the data directory was created."""
    aborted_episodes: int
    """Episodes aborted since the data directory was created."""
    paused: bool
    """Whether generation is paused."""
    models: list[ModelInfo]
    """The hosted models."""
    last_event_sequence: int
    """Sequence number of the newest server event."""
    holds: list[TrainingHold] = field(default_factory=list)
    """Holds of training now, by model, the oldest first."""


@dataclass(frozen=True)
class ClientInfo:
    """A client attached to the server now (one live session)."""

    session_id: str
    """The session id."""
    client_name: str
    """Name the client gave (`ClientConfig.client_name`)."""
    agent_version: str
    """Agent version the client gave (`ClientConfig.agent_version`)."""
    episode_agent_versions: list[str]
    """Agent versions of the session's episodes."""
    tasks: list[str]
    """Task ids of the session's episodes (at most 100)."""
    models: list[str]
    """Models the session's episodes listed."""
    open_episodes: int
    """The session's episodes open now."""
    ended_episodes: int
    """The session's episodes ended."""
    aborted_episodes: int
    """The session's episodes aborted."""
    lease_expire_time: datetime.datetime | None
    """When the lease runs out unless renewed (UTC)."""


@dataclass(frozen=True)
class AgentVersionInfo:
    """Episode counts of one agent version over the server's whole data directory."""

    agent_version: str
    """The agent version (empty when clients gave none)."""
    open_episodes: int
    """Its episodes open now."""
    ended_episodes: int
    """Its episodes ended."""
    aborted_episodes: int
    """Its episodes aborted."""
    consumed_episodes: int
    """Its ended episodes a trainer has consumed (trained or dropped)."""
    mean_reward: float
    """Mean episode reward of its ended episodes (0 when none ended)."""


@dataclass(frozen=True)
class ClientList:
    """What `AsyncSwarmClient.list_clients` returns."""

    clients: list[ClientInfo]
    """Clients with a live lease, by client name."""
    agent_versions: list[AgentVersionInfo]
    """Every agent version that started an episode, live client or not."""


@dataclass(frozen=True)
class PolicyVersionChanged:
    """A model's weights changed."""

    sequence: int
    """Position of the event in the server's event log."""
    model: str
    """The model."""
    policy_version: int
    """Its new policy version."""


@dataclass(frozen=True)
class Pausing:
    """Generation is paused (e.g. for a weight update); calls wait until it resumes."""

    sequence: int
    """Position of the event in the server's event log."""
    reason: str
    """Why, in words."""


@dataclass(frozen=True)
class Resumed:
    """Generation resumed after a pause."""

    sequence: int
    """Position of the event in the server's event log."""
    reason: str
    """Why it had paused, in words."""


@dataclass(frozen=True)
class Draining:
    """The server is shutting down; finish or abort open episodes."""

    sequence: int
    """Position of the event in the server's event log."""
    grace: float
    """Seconds left before open calls are cut."""


Event: TypeAlias = PolicyVersionChanged | Pausing | Resumed | Draining
"""A server event, as yielded by `AsyncSwarmClient.events`."""
