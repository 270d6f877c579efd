"""What the viewer shows, computed from stored episodes (no HTML here).

An episode's calls are merged into timelines by `timelines.merge.merge_calls`, the
same function the trainer uses, so the page shows exactly the sequences that train:
tokens with loss mask 1 are "trained" (generated, with their logprob and policy
version), the rest "context". A call's span in a timeline starts where the previous
absorbed call ended (its new prompt tokens) and its completion starts at its first
generated token. Timeline i > 0 exists because of fork i - 1 of the merge stats,
whose kind (retry / branch / edit / unrelated) and position the merge recorded.

A GRPO group's tree-packing view is `timelines.pack.plan_packing` over the group's
timelines: the segments the trainer would compute once and share.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmrl_server.store.records import CallRecord, EpisodeRecord
from swarmrl_server.timelines.flops import ModelShape
from swarmrl_server.timelines.merge import MergeStats, Timeline, merge_calls
from swarmrl_server.timelines.pack import PackPlan, plan_packing

Decode = Callable[[Sequence[int]], list[str]]
"""Token ids → one display string per token."""

LOGPROB_BINS = (-0.1, -0.5, -1.0, -2.0, -4.0)
"""Upper edges of the colour classes lp0 (likely) … lp5 (unlikely)."""


def ids_only(ids: Sequence[int]) -> list[str]:
    """The fallback decoder when no tokenizer is at hand: ⟨id⟩ per token."""
    return [f"⟨{i}⟩" for i in ids]


def logprob_class(logprob: float) -> str:
    for k, edge in enumerate(LOGPROB_BINS):
        if logprob >= edge:
            return f"lp{k}"
    return f"lp{len(LOGPROB_BINS)}"


@dataclass
class TokenView:
    token_id: int
    text: str
    trained: bool
    logprob: float | None = None
    policy_version: int = -1
    call: int = -1
    """Index into the episode's calls of the call that generated it (-1: context)."""
    top: list[tuple[str, float]] = field(default_factory=list)

    @property
    def css(self) -> str:
        if not self.trained:
            return "tok context"
        return f"tok trained {logprob_class(self.logprob if self.logprob is not None else 0.0)}"


@dataclass
class Marker:
    kind: str
    """"call" (a call's span starts), "completion" (its generated tokens start) or "fork"."""
    label: str
    css: str


@dataclass
class TimelineView:
    index: int
    model: str
    tokens: list[TokenView]
    markers: dict[int, list[Marker]]
    """Position → markers drawn before the token at that position."""
    fork_kind: str = ""
    fork_position: int = -1

    @property
    def trained(self) -> int:
        return sum(t.trained for t in self.tokens)


@dataclass
class CallView:
    seq: int
    call_id: str
    model: str
    policy_version: int
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    reward: float | None
    fork_reason: str
    timeline: int
    """Index of the timeline (of the whole episode) that absorbed it."""
    mean_logprob: float
    constrained: bool = False
    """Decoded under a grammar: trained under its replayed mask, or as context (merge.py)."""
    version_spans: list[tuple[int, int, int]] = field(default_factory=list)
    """(policy version, start, end) over the completion tokens (`CallRecord.spans`)."""


@dataclass
class EpisodeView:
    record: EpisodeRecord
    calls: list[CallView]
    timelines: list[TimelineView]
    stats: dict[str, MergeStats]
    """Per model."""


def _fork_reason(call: CallRecord) -> str:
    if not call.chat_json:
        return ""
    try:
        return str(json.loads(call.chat_json).get("fork_reason") or "")
    except (ValueError, AttributeError):
        return ""


def _timeline_view(index: int, model: str, t: Timeline, decode: Decode,
                   seq_of: dict[str, int], calls: dict[str, CallRecord]) -> TimelineView:
    texts = decode(t.token_ids)
    tokens: list[TokenView] = []
    for pos, (tid, text) in enumerate(zip(t.token_ids, texts)):
        if t.loss_mask[pos]:
            call_id = t.call_ids[t.call_index[pos]]
            tokens.append(TokenView(tid, text, True, t.old_logprobs[pos], t.policy_versions[pos],
                                    seq_of[call_id]))
        else:
            tokens.append(TokenView(tid, text, False))
    markers: dict[int, list[Marker]] = {}
    start = 0
    for k, call_id in enumerate(t.call_ids):
        call = calls[call_id]
        first_generated = t.call_ends[k] - len(call.completion_ids)
        label = f"call {seq_of[call_id]} · v{call.policy_version}"
        if first_generated > start:  # the call's new prompt tokens
            markers.setdefault(start, []).append(Marker("call", label, "call-start"))
            markers.setdefault(first_generated, []).append(
                Marker("completion", f"→ v{call.policy_version}", "gen-start"))
        else:  # nothing new in the prompt: the span is the completion alone
            markers.setdefault(first_generated, []).append(Marker("call", label, "call-start"))
        # Alternatives per token are kept only when the call recorded them.
        for j, alts in enumerate(call.top_logprobs[: len(call.completion_ids)]):
            alt_texts = decode([a for a, _ in alts])
            tokens[first_generated + j].top = [(s, lp) for s, (_, lp) in zip(alt_texts, alts)]
        start = t.call_ends[k]
    return TimelineView(index, model, tokens, markers)


def episode_view(record: EpisodeRecord, decoders: Callable[[str], Decode]) -> EpisodeView:
    """The episode's calls and timelines (per model, in call order)."""
    calls = {c.call_id: c for c in record.calls}
    seq_of = {c.call_id: c.seq for c in record.calls}
    timelines: list[TimelineView] = []
    timeline_of: dict[str, int] = {}
    stats: dict[str, MergeStats] = {}
    models = list(dict.fromkeys([*record.models, *(c.model for c in record.calls)]))
    for model in models:
        own = [c for c in record.calls if c.model == model]
        if not own:
            continue
        merged, stats[model] = merge_calls(own)
        for i, t in enumerate(merged):
            view = _timeline_view(len(timelines), model, t, decoders(model), seq_of, calls)
            if i > 0:  # every timeline after the first of a model is a fork
                view.fork_kind = stats[model].fork_kinds[i - 1]
                view.fork_position = stats[model].fork_positions[i - 1]
                view.markers.setdefault(view.fork_position, []).insert(0, Marker(
                    "fork", f"fork: {view.fork_kind} @ {view.fork_position}",
                    f"fork fork-{view.fork_kind}"))
            for call_id in t.call_ids:
                timeline_of[call_id] = view.index
            timelines.append(view)
    call_views = [
        CallView(
            seq=c.seq, call_id=c.call_id, model=c.model, policy_version=c.policy_version,
            finish_reason=c.finish_reason, prompt_tokens=len(c.prompt_ids),
            completion_tokens=len(c.completion_ids), reward=c.reward,
            fork_reason=_fork_reason(c), timeline=timeline_of.get(c.call_id, -1),
            mean_logprob=(sum(c.logprobs) / len(c.logprobs)) if c.logprobs else math.nan,
            constrained=c.constrained, version_spans=c.spans(),
        )
        for c in sorted(record.calls, key=lambda c: c.seq)
    ]
    return EpisodeView(record, call_views, timelines, stats)


@dataclass
class SegmentView:
    index: int
    parent: int
    start: int
    length: int
    shared_by: list[str]
    """Episodes whose timelines pass through this segment."""
    timelines: int
    """Timelines that pass through it (an episode's forks share prefixes too)."""
    text: str
    """The segment's first tokens, decoded (a preview)."""
    truncated: bool = False


@dataclass
class GroupView:
    task_id: str
    group_id: str
    model: str
    episodes: list[EpisodeRecord]
    plan: PackPlan | None
    """The group's whole prefix trie: every node that several timelines share is a segment."""
    segments: list[SegmentView]
    tokens_merged: int
    tokens_shared: int
    """Tokens once every shared prefix is computed once (the trie's size)."""
    tokens_packed: int
    """Tokens the trainer's planner would compute (it shares a node only where that
    saves more than a forward call costs)."""


def group_view(records: Sequence[EpisodeRecord], model: str, decode: Decode,
               shape: ModelShape, *, preview_tokens: int = 200) -> GroupView:
    """Which prefixes the group's timelines share (the packer's trie with every shared
    node kept; segments below a shared node belong to fewer episodes), and what the
    trainer's own plan computes."""
    timelines: list[Timeline] = []
    for r in records:
        own = [c for c in r.calls if c.model == model]
        if own:
            timelines.extend(merge_calls(own)[0])
    tokens_merged = sum(len(t) for t in timelines)
    if not timelines:
        return GroupView(records[0].task_id if records else "",
                         records[0].group_id if records else "", model, list(records), None,
                         [], 0, 0, 0)
    # Zero overhead per forward: every shared node pays for itself, so the trie shows whole.
    plan = plan_packing(timelines, shape, kinds=("tree",), segment_overhead_tokens=0.0)
    trainer_plan = plan_packing(timelines, shape)
    segments: list[SegmentView] = []
    for unit in plan.units:
        if unit.kind != "tree":
            for i in unit.timelines:
                t = timelines[i]
                segments.append(SegmentView(len(segments), -1, 0, len(t), [t.episode_id], 1,
                                            "".join(decode(t.token_ids[:preview_tokens])),
                                            len(t) > preview_tokens))
            continue
        base = len(segments)
        users: dict[int, list[str]] = {}  # segment -> episode id of each timeline through it
        for local, path in zip(unit.timelines, unit.paths):
            for s in path:
                users.setdefault(s, []).append(timelines[local].episode_id)
        for k, seg in enumerate(unit.segments):
            segments.append(SegmentView(
                base + k, base + seg.parent if seg.parent >= 0 else -1, seg.start, len(seg),
                sorted(set(users.get(k, []))), len(users.get(k, [])),
                "".join(decode(seg.token_ids[:preview_tokens])),
                len(seg) > preview_tokens))
    return GroupView(records[0].task_id, records[0].group_id, model, list(records), plan,
                     segments, tokens_merged, plan.tokens, trainer_plan.tokens)


def export_jsonl(record: EpisodeRecord) -> Iterator[str]:
    """The episode as JSON lines: the episode first, then one line per call (exact ids)."""
    head: dict[str, Any] = {
        "type": "episode", "episode_id": record.episode_id, "task_id": record.task_id,
        "group_id": record.group_id, "agent_version": record.agent_version,
        "models": record.models, "labels": record.labels, "state": record.state.value,
        "reward": record.reward, "start_time": record.start_time, "end_time": record.end_time,
        "abort_reason": record.abort_reason, "num_calls": len(record.calls),
    }
    yield json.dumps(head) + "\n"
    for c in sorted(record.calls, key=lambda c: c.seq):
        yield json.dumps({
            "type": "call", "call_id": c.call_id, "seq": c.seq, "model": c.model,
            "prompt_ids": c.prompt_ids, "completion_ids": c.completion_ids,
            "logprobs": c.logprobs, "policy_version": c.policy_version,
            "version_spans": c.spans(),
            "finish_reason": c.finish_reason, "temperature": c.temperature, "text": c.text,
            "parent_call_id": c.parent_call_id, "reward": c.reward, "created_at": c.created_at,
            "chat": json.loads(c.chat_json) if c.chat_json else None,
        }) + "\n"
