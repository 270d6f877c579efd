"""What the trajectory store keeps: sessions, episodes and the calls made in them."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class EpisodeState(str, enum.Enum):
    OPEN = "open"
    ENDED = "ended"
    ABORTED = "aborted"


@dataclass
class SessionRecord:
    session_id: str
    client_name: str
    lease_s: float
    expires_at: float
    """Unix time after which the session's open episodes are aborted."""
    owner: str = ""
    """The principal that opened the session (see `identity`)."""


@dataclass
class CallRecord:
    """One model call exactly as the engine ran it. Token ids are the truth: nothing
    downstream re-tokenizes `text` to rebuild what the model saw."""

    call_id: str
    episode_id: str
    seq: int
    """Order of the call within its episode (0, 1, ...)."""
    model: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    """Logprob of each completion token under the sampling distribution."""
    policy_version: int
    finish_reason: str
    """"stop", "length" or "tool_calls"."""
    temperature: float
    """Temperature the tokens were sampled at; the trainer recomputes logprobs with it."""
    text: str
    request_id: str = ""
    parent_call_id: str = ""
    """The latest earlier call whose prompt + completion this call's prompt extends."""
    reward: float | None = None
    created_at: float = 0.0
    chat_json: str = ""
    """For chat input: {"messages", "tools", "reply"} as JSON, so the next turn can extend
    this call's exact ids instead of re-rendering."""
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    """Alternatives per generated token, (token id, logprob), when the call asked for them
    (kept in the store, shown by the viewer)."""
    chat: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    """Not persisted: `chat_json` already parsed (kept on an open episode's latest call,
    so the next turn costs no JSON round-trip of the whole conversation)."""
    rendered_text: str = field(default="", repr=False, compare=False)
    """Not persisted: the chat template's text for this call's messages (kept on an open
    episode's latest call: the next turn's bridge starts from it instead of a re-render)."""
    constrained: bool = False
    """Decoded under a grammar (forced tool call, JSON response format): `logprobs` are
    those of the grammar-masked, renormalised distribution that produced the tokens."""
    grammar: str = ""
    """That grammar, as the engine compiled it (`engine.grammar.GrammarSpec` as JSON): the
    trainer replays it along `completion_ids` to mask its own logits the same way, so it
    recomputes `logprobs` exactly and trains the call (`timelines.grammar`). "" on an
    unconstrained call, and on a constrained one recorded before grammars were kept, which
    can only be trained as context (loss mask 0)."""
    version_spans: list[tuple[int, int, int]] = field(default_factory=list)
    """(policy version, start, end): completion tokens [start, end) came from that
    version's weights. Empty: one span, `policy_version` over every token (see `spans`)."""

    def spans(self) -> list[tuple[int, int, int]]:
        """Which version generated which completion tokens; `policy_version` is always the
        last span's (the version of the last token)."""
        return self.version_spans or [(self.policy_version, 0, len(self.completion_ids))]


@dataclass
class EpisodeRecord:
    episode_id: str
    session_id: str
    task_id: str
    group_id: str
    agent_version: str
    models: list[str]
    labels: dict[str, str]
    state: EpisodeState
    start_time: float
    start_request_id: str = ""
    end_request_id: str = ""
    reward: float | None = None
    end_time: float | None = None
    abort_reason: str = ""
    num_calls: int = 0
    owner: str = ""
    """Its session's owner, kept on the episode so it outlives the session."""
    calls: list[CallRecord] = field(default_factory=list)
    """Filled only when asked for (they can be large)."""
    model_rewards: dict[str, float] = field(default_factory=dict)
    """Rewards given to single models; a model without one gets `reward`."""

    def reward_for(self, model: str) -> float | None:
        """The reward `model`'s trainer uses: its own, else the episode's."""
        return self.model_rewards.get(model, self.reward)
