"""Prefix-tree packing: timelines that share a prefix compute it once in the actor update.

The timelines of an episode (and, when configured, of a GRPO group) are inserted
into a token trie. Each trie node that several timelines pass through becomes a
*segment*: one forward whose KV cache holds its ancestors' keys and values, kept
differentiable, so the backward of every branch flows into the shared prefix. The
planner keeps a node as its own segment only when that saves more FLOPs than a
forward call costs (`segment_overhead_tokens`); otherwise the node's tokens are
copied into each child's segment.

Each connected tree is then run one of three ways, whichever the FLOP model
(`flops.py`) says is cheapest:

- "rows": the tree's timelines as plain causal rows (no sharing; the fallback too,
  for a model that can't take the tree),
- "tree": segments, each attending to its prefix through the KV cache — block-sparse
  by construction, cost = the tree's FLOP limit (prefix-causal attention kernel in
  `attention.py`),
- "dense": all segments packed into one row with position ids and a 4D tree mask.
  The kernel then computes every (query, key) pair of the packed row, so this only
  wins for small trees, where one forward instead of many pays for the waste.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from swarmrl_server.timelines.flops import ModelShape
from swarmrl_server.timelines.merge import MergeStats, Timeline, common_prefix

KINDS = ("rows", "tree", "dense")


@dataclass
class Segment:
    """Tokens computed in one forward, after the tokens of its parent chain."""

    parent: int
    """Index of the parent segment in the unit (-1: starts at position 0)."""
    start: int
    """Position of the first token (= number of tokens in the parent chain)."""
    token_ids: list[int]

    def __len__(self) -> int:
        return len(self.token_ids)


@dataclass
class PackUnit:
    """A connected prefix tree, and how it runs."""

    kind: str
    """"rows", "tree" or "dense"."""
    timelines: list[int]
    """Indices into `PackPlan.timelines`."""
    segments: list[Segment] = field(default_factory=list)
    """Parents before children (empty for kind "rows")."""
    paths: list[list[int]] = field(default_factory=list)
    """Per timeline of the unit: its segments, root first; their tokens concatenated are
    the timeline's tokens."""
    tokens: int = 0
    """Tokens the forward computes."""
    flops: float = 0.0
    """Forward + backward FLOPs the kernels compute (dense: every pair of the row)."""


@dataclass
class PackPlan:
    """How one batch of timelines runs through the actor (see `forward_packed`)."""

    timelines: list[Timeline]
    units: list[PackUnit]

    @property
    def rows(self) -> int:
        return sum(len(u.timelines) if u.kind == "rows" else (
            len(u.segments) if u.kind == "tree" else 1) for u in self.units)

    @property
    def tokens(self) -> int:
        return sum(u.tokens for u in self.units)

    @property
    def flops(self) -> float:
        return sum(u.flops for u in self.units)

    def split(self) -> list[PackPlan]:
        """One plan per unit: a trainer can run forward + backward on each in turn, so
        that only one tree's activations are alive at a time."""
        out = []
        for u in self.units:
            sub = PackUnit(u.kind, list(range(len(u.timelines))), u.segments, u.paths,
                           u.tokens, u.flops)
            out.append(PackPlan([self.timelines[i] for i in u.timelines], [sub]))
        return out


class _Node:
    __slots__ = ("tokens", "children", "ends", "depth")

    def __init__(self, tokens: list[int], depth: int) -> None:
        self.tokens = tokens
        self.children: dict[int, _Node] = {}
        self.ends: list[int] = []
        """Timelines that end exactly at this node."""
        self.depth = depth
        """Position of tokens[0]."""

    def split(self, at: int) -> None:
        """Keeps tokens[:at] here and moves the rest into a single child."""
        tail = _Node(self.tokens[at:], self.depth + at)
        tail.children, tail.ends = self.children, self.ends
        self.tokens = self.tokens[:at]
        self.children, self.ends = {tail.tokens[0]: tail}, []


def _build_trie(timelines: Sequence[Timeline], members: Sequence[int]) -> _Node:
    root = _Node([], 0)
    for i in members:
        ids = timelines[i].token_ids
        node, pos = root, 0
        while True:
            if pos == len(ids):
                node.ends.append(i)
                break
            child = node.children.get(ids[pos])
            if child is None:
                node.children[ids[pos]] = leaf = _Node(list(ids[pos:]), pos)
                leaf.ends.append(i)
                break
            n = common_prefix(child.tokens, ids[pos:pos + len(child.tokens)])
            if n < len(child.tokens):
                child.split(n)
            node, pos = child, pos + n
    return root


def _decide(top: _Node, shape: ModelShape, overhead: float) -> dict[int, bool]:
    """Which nodes are their own segment (by id). Bottom-up: a node not kept is
    recomputed once per segment below it that starts within its subtree, so keeping it
    saves (uses - 1) x its FLOPs; it is kept when that beats one forward call."""
    keep: dict[int, bool] = {}
    uses: dict[int, int] = {}
    order: list[_Node] = []
    stack = [top]
    while stack:  # iterative: a trie can be deeper than Python's recursion limit
        node = stack.pop()
        order.append(node)
        stack.extend(node.children.values())
    for node in reversed(order):  # children before parents
        n = len(node.ends) + sum(
            1 if keep[id(c)] else uses[id(c)] for c in node.children.values()
        )
        saved = (n - 1) * shape.segment_flops(node.depth, len(node.tokens))
        # A node where a timeline ends must exist: its last position's logits belong to it.
        keep[id(node)] = bool(node.ends) or saved > overhead
        uses[id(node)] = n
    return keep


def _segments(
    root_child: _Node, keep: dict[int, bool]
) -> tuple[list[Segment], dict[int, list[int]]]:
    """Segments of one connected tree in DFS order, and each timeline's segment path."""
    segments: list[Segment] = []
    paths: dict[int, list[int]] = {}
    stack: list[tuple[_Node, int, list[int], list[int]]] = [(root_child, -1, [], [])]
    while stack:
        node, parent, pending, path = stack.pop()
        if keep[id(node)]:
            tokens = pending + node.tokens
            segments.append(Segment(parent, node.depth - len(pending), tokens))
            parent, pending, path = len(segments) - 1, [], path + [len(segments) - 1]
            for i in node.ends:
                paths[i] = path
        else:
            pending = pending + node.tokens
        for child in reversed(list(node.children.values())):
            stack.append((child, parent, pending, path))
    return segments, paths


def plan_packing(
    timelines: Sequence[Timeline],
    shape: ModelShape,
    *,
    group_key: Callable[[Timeline], Hashable] | None = None,
    kinds: Sequence[str] = KINDS,
    segment_overhead_tokens: float = 64.0,
    stats: MergeStats | None = None,
) -> PackPlan:
    """Plans the actor forward of `timelines` (one micro-batch: its graph spans the plan).

    group_key: timelines share prefixes only with others of the same key (e.g. the
        episode id, or the GRPO group's uid); None shares across the whole batch.
    kinds: the execution kinds allowed ("rows" is always allowed as the fallback;
        pass ("rows",) for a model that can't take the tree).
    segment_overhead_tokens: the cost of one extra forward call, in tokens' worth of
        linear FLOPs; sharing a node must save more than that.
    stats: if given, its rows / tokens_packed / FLOP fields are filled in.
    """
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown packing kinds {sorted(unknown)}; valid: {KINDS}")
    overhead = segment_overhead_tokens * shape.linear_flops_per_token
    groups: dict[Hashable, list[int]] = {}
    for i, t in enumerate(timelines):
        groups.setdefault(group_key(t) if group_key else None, []).append(i)
    units: list[PackUnit] = []
    for members in groups.values():
        root = _build_trie(timelines, members)
        for i in root.ends:  # empty timelines: nothing to compute
            units.append(PackUnit("rows", [i]))
        for child in root.children.values():
            units.append(_plan_tree(timelines, child, shape, overhead, kinds))
    plan = PackPlan(list(timelines), units)
    if stats is not None:
        stats.rows = plan.rows
        stats.tokens_packed = plan.tokens
        stats.flops_packed = plan.flops
        stats.flops_merged = sum(shape.row_flops(len(t)) for t in timelines)
        stats.flops_per_call = sum(shape.row_flops(n) for n in stats.call_lengths)
    return plan


def _plan_tree(
    timelines: Sequence[Timeline], top: _Node, shape: ModelShape, overhead: float,
    kinds: Sequence[str],
) -> PackUnit:
    keep = _decide(top, shape, overhead)
    segments, paths = _segments(top, keep)
    members = sorted(paths)
    ordered_paths = [paths[i] for i in members]
    lengths = [len(timelines[i]) for i in members]
    packed = sum(len(s) for s in segments)
    # Cost of each way to run the tree: FLOPs plus one overhead per forward call.
    options: dict[str, tuple[float, float, int]] = {
        "rows": (sum(shape.row_flops(n) for n in lengths), 0.0, sum(lengths)),
    }
    if len(members) > 1 or len(segments) > 1:
        options["tree"] = (
            sum(shape.segment_flops(s.start, len(s)) for s in segments),
            (len(segments) - len(members)) * overhead, packed,
        )
        options["dense"] = (shape.dense_flops(packed), (1 - len(members)) * overhead, packed)
    allowed = {k: v for k, v in options.items() if k in kinds or k == "rows"}
    kind = min(allowed, key=lambda k: allowed[k][0] + allowed[k][1])
    flops, _, tokens = allowed[kind]
    if kind == "rows":
        return PackUnit("rows", members, tokens=tokens, flops=flops)
    return PackUnit(kind, members, segments, ordered_paths, tokens=tokens, flops=flops)
