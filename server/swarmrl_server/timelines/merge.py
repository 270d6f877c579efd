"""Timeline merging: an episode's calls become as few training sequences as possible.

A call extends a timeline when its prompt ids start with that timeline's tokens
(the earlier call's prompt + completion, and whatever the timeline absorbed
since), token for token — never by comparing text. The call's new prompt tokens
join with loss mask 0 and its completion with loss mask 1, carrying the logprobs
and policy version recorded at generation time, token by token (a call resumed across
a weight sync carries each of its version spans, `CallRecord.spans`). A call that extends no timeline
(a fork: edited history, compaction, a retry, a parallel sub-agent) starts a new
one. Every generated token lands in exactly one timeline; no other token is ever
trained.

A call decoded under a grammar (`CallRecord.grammar`) is trained under it when the
merge is given the grammar's `choices` (`timelines.grammar.GrammarReplay`): loss mask 1
only where the grammar left a choice (a forced token has probability 1 and teaches
nothing), and the span is listed in `Timeline.grammars`, so the forward pass masks its
logits there as the engine did. Without `choices` (the `constrained_calls=context`
option), and for a constrained call recorded without its grammar, the completion joins
as context, loss mask 0: its logprobs are those of a masked distribution that an
unmasked forward cannot recompute.

Concurrent calls (parallel sub-agents) need no special case: calls are taken in
`seq` order, and a call can only extend what existed when it was made, because its
prompt holds the earlier call's completion. When two calls extend the same state,
the first extends the timeline and the second forks from it; tree packing
(`pack.py`) then computes their shared prefix once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from swarmrl_server.store.records import CallRecord

Choices = Callable[[str, Sequence[int]], list[bool]]
"""(grammar JSON, completion ids) -> per token, whether the grammar left a choice there
(`GrammarReplay.choices`)."""

FORK_RETRY = "retry"
"""The prompt is a prefix of a timeline that already went further (a re-sent call)."""
FORK_BRANCH = "branch"
"""Diverges exactly where an earlier call's completion ended (parallel call, sub-agent,
or a retry whose failed attempt was dropped from the history)."""
FORK_EDIT = "edit"
"""Diverges inside a span (compaction, truncation, an edited message, template drift)."""
FORK_UNRELATED = "unrelated"
"""Shares no token with any timeline (another agent or system prompt)."""


@dataclass
class Timeline:
    """One training sequence: tokens plus per-token training data."""

    episode_id: str
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    """1 where the model generated the token (its stop token included), else 0 (also 0
    for a constrained call's forced tokens, and for all its tokens when it is trained as
    context: module docstring)."""
    old_logprobs: list[float] = field(default_factory=list)
    """Logprob recorded at generation time (0.0 where loss_mask is 0)."""
    policy_versions: list[int] = field(default_factory=list)
    """Version of the weights that generated the token (-1 where loss_mask is 0): per
    token, since a call resumed across a weight sync spans several versions."""
    temperatures: list[float] = field(default_factory=list)
    """Sampling temperature of generated tokens (1.0 elsewhere)."""
    call_index: list[int] = field(default_factory=list)
    """Index into `call_ids` of the call that generated the token (-1 elsewhere)."""
    call_ids: list[str] = field(default_factory=list)
    call_rewards: list[float | None] = field(default_factory=list)
    """Per-call reward of each call in `call_ids` (None where the client gave none)."""
    call_ends: list[int] = field(default_factory=list)
    """Position just after each absorbed call's completion (a call boundary)."""
    grammars: list[tuple[int, int, str]] = field(default_factory=list)
    """(start, end, grammar JSON): tokens [start, end) are a call's completion decoded under
    that grammar and trained under its replayed mask (`timelines.grammar`)."""

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_generated(self) -> int:
        return sum(self.loss_mask)

    def _append(self, ids: Sequence[int], *, call: CallRecord | None,
                choices: Choices | None = None) -> None:
        self.token_ids.extend(ids)
        n = len(ids)
        if call is None:
            self.loss_mask.extend([0] * n)
            self.old_logprobs.extend([0.0] * n)
            self.policy_versions.extend([-1] * n)
            self.temperatures.extend([1.0] * n)
            self.call_index.extend([-1] * n)
        else:
            if len(call.logprobs) != n:
                raise ValueError(
                    f"call {call.call_id}: {len(call.logprobs)} logprobs for {n} completion tokens"
                )
            if call.constrained and (choices is None or not call.grammar):
                # Sampled from a grammar-masked distribution that this forward pass will
                # not recompute: the tokens stay in the timeline as context only.
                self.loss_mask.extend([0] * n)
                self.old_logprobs.extend([0.0] * n)
                self.policy_versions.extend([-1] * n)
                self.temperatures.extend([1.0] * n)
            else:
                trained = choices(call.grammar, ids) if call.grammar and choices else [True] * n
                versions = token_versions(call)
                self.loss_mask.extend(int(c) for c in trained)
                self.old_logprobs.extend(lp if c else 0.0 for lp, c in zip(call.logprobs, trained))
                self.policy_versions.extend(v if c else -1 for v, c in zip(versions, trained))
                self.temperatures.extend([call.temperature] * n)
                if call.grammar and choices:
                    self.grammars.append((len(self.token_ids) - n, len(self.token_ids),
                                          call.grammar))
            self.call_index.extend([len(self.call_ids)] * n)
            self.call_ids.append(call.call_id)
            self.call_rewards.append(call.reward)
            self.call_ends.append(len(self.token_ids))

    def extend(self, call: CallRecord, choices: Choices | None = None) -> None:
        """Absorbs `call`, whose prompt starts with this timeline's tokens (`choices`:
        train a constrained call under its grammar, module docstring)."""
        self._append(call.prompt_ids[len(self.token_ids):], call=None)
        self._append(call.completion_ids, call=call, choices=choices)


def token_versions(call: CallRecord) -> list[int]:
    """The policy version of each completion token, from the call's version spans
    (which must tile the completion exactly: a gap would leave tokens of no version)."""
    out: list[int] = []
    for version, start, end in call.spans():
        if start != len(out) or end < start:
            raise ValueError(f"call {call.call_id}: version span [{start}, {end}) does not "
                             f"continue from token {len(out)}")
        out.extend([version] * (end - start))
    if len(out) != len(call.completion_ids):
        raise ValueError(f"call {call.call_id}: version spans cover {len(out)} of "
                         f"{len(call.completion_ids)} completion tokens")
    return out


@dataclass
class MergeStats:
    """What merging (and, once planned, packing) did to one batch of calls."""

    calls: int = 0
    timelines: int = 0
    tokens_per_call: int = 0
    """Tokens if every call were its own row (prompt + completion)."""
    tokens_merged: int = 0
    forks: int = 0
    """Calls after the first that extended no timeline."""
    fork_positions: list[int] = field(default_factory=list)
    """For each fork: where its prompt first differs from the closest timeline."""
    fork_kinds: list[str] = field(default_factory=list)
    """For each fork: FORK_RETRY, FORK_BRANCH, FORK_EDIT or FORK_UNRELATED."""
    call_lengths: list[int] = field(default_factory=list)
    """Row length of each call (to count per-call FLOPs)."""
    rows: int = 0
    """Forward passes of the actor update: timelines, or segments once tree-packed."""
    tokens_packed: int = 0
    """Tokens the actor forward computes after packing (set by `plan_packing`)."""
    flops_per_call: float = 0.0
    flops_merged: float = 0.0
    flops_packed: float = 0.0
    """Forward + backward FLOPs (see `flops.py`), set by `plan_packing`."""

    def add(self, other: MergeStats) -> None:
        self.calls += other.calls
        self.timelines += other.timelines
        self.tokens_per_call += other.tokens_per_call
        self.tokens_merged += other.tokens_merged
        self.forks += other.forks
        self.fork_positions.extend(other.fork_positions)
        self.fork_kinds.extend(other.fork_kinds)
        self.call_lengths.extend(other.call_lengths)
        self.rows += other.rows
        self.tokens_packed += other.tokens_packed
        self.flops_per_call += other.flops_per_call
        self.flops_merged += other.flops_merged
        self.flops_packed += other.flops_packed

    def to_metrics(self) -> dict[str, float]:
        """Flat metrics for a step's log (ratios are 1.0 when nothing was counted)."""
        out = {
            "merge/calls": float(self.calls),
            "merge/timelines": float(self.timelines),
            "merge/rows": float(self.rows or self.timelines),
            "merge/forks": float(self.forks),
            "merge/tokens_per_call": float(self.tokens_per_call),
            "merge/tokens_merged": float(self.tokens_merged),
            "merge/tokens_packed": float(self.tokens_packed or self.tokens_merged),
            "merge/token_ratio": _ratio(self.tokens_per_call, self.tokens_merged),
        }
        for kind in (FORK_RETRY, FORK_BRANCH, FORK_EDIT, FORK_UNRELATED):
            out[f"merge/forks_{kind}"] = float(self.fork_kinds.count(kind))
        if self.fork_positions:
            out["merge/fork_position_mean"] = sum(self.fork_positions) / len(self.fork_positions)
        if self.tokens_packed:
            out["merge/pack_token_ratio"] = _ratio(self.tokens_merged, self.tokens_packed)
        if self.flops_merged:
            out["merge/flop_ratio"] = _ratio(self.flops_per_call, self.flops_merged)
        if self.flops_packed:
            out["merge/pack_flop_ratio"] = _ratio(self.flops_merged, self.flops_packed)
        return out


def _ratio(a: float, b: float) -> float:
    return a / b if b else 1.0


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]: bisect with C-speed slices
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _fork_kind(position: int, prompt_len: int, closest: Timeline | None) -> str:
    if closest is None or position == 0:
        return FORK_UNRELATED
    if position == prompt_len:
        return FORK_RETRY
    if position in closest.call_ends:
        return FORK_BRANCH
    return FORK_EDIT


def merge_calls(
    calls: Sequence[CallRecord], choices: Choices | None = None
) -> tuple[list[Timeline], MergeStats]:
    """Merges one episode's calls (of one model) into timelines, in call order.

    A call extends the longest timeline whose tokens its prompt starts with; failing
    that it starts a new timeline (a fork, recorded with where and why it diverged).
    `choices`: constrained calls are trained under their grammar (module docstring);
    None trains them as context.
    """
    ordered = sorted(calls, key=lambda c: c.seq)
    timelines: list[Timeline] = []
    stats = MergeStats(calls=len(ordered))
    for call in ordered:
        prompt = call.prompt_ids
        stats.tokens_per_call += len(prompt) + len(call.completion_ids)
        stats.call_lengths.append(len(prompt) + len(call.completion_ids))
        best: Timeline | None = None
        closest: Timeline | None = None
        closest_at = 0
        for t in timelines:
            n = len(t.token_ids)
            if n <= len(prompt) and prompt[:n] == t.token_ids:
                if best is None or n > len(best.token_ids):
                    best = t
            else:
                at = common_prefix(t.token_ids, prompt)
                if closest is None or at > closest_at:
                    closest, closest_at = t, at
        if best is None:
            if timelines:
                stats.forks += 1
                stats.fork_positions.append(closest_at)
                stats.fork_kinds.append(_fork_kind(closest_at, len(prompt), closest))
            best = Timeline(episode_id=call.episode_id)
            timelines.append(best)
        best.extend(call, choices)
    stats.timelines = len(timelines)
    stats.rows = len(timelines)
    stats.tokens_merged = sum(len(t) for t in timelines)
    return timelines, stats
