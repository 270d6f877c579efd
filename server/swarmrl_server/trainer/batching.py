"""Batching: which ended episodes form the next training batch, and when.

Episodes with the same task id and group id are cut into groups of `group_size`
in the order they ended (with `group_size=0` a group is simply everything that
shares the ids). A group is *complete* once it is full; partial groups wait
(unless `partial_groups=train`), because a GRPO/RLOO baseline computed from half
a group is biased.

Groups are never split. A group that an episode still open (started, neither ended
nor aborted) would join is *sealed* and never planned, with `partial_groups=train`
too: with `group_size=N`, the partial group of ids that have an open episode listing
this model; with `group_size=0`, the whole group of those ids. It becomes plannable
when its last open episode ends (the trainer is woken) or is aborted, by its client
or by the reaper when its session's lease lapses (the trainer's next poll, within a
second). Clients end a group's episodes one RPC at a time, so without the seal a plan
made between two ends would train half the group; the seal is the server's, so it
holds for every client (the SDK's runner, stubs, the OpenAI shim's), with no batch RPC
to remember to call. Complete groups are never sealed: no open episode can join a
full group. A client that reuses one group id for a stream of overlapping episodes
(with `group_size=0`, or partial groups trained) has its groups wait until a moment
when none of them is open.

A batch is ready by one of four rules:

- ``episodes``: complete groups holding at least `batch_size` episodes;
- ``groups``: `batch_size` complete groups;
- ``varied_groups``: `batch_size` complete groups whose rewards are not all equal
  (DAPO's dynamic sampling; uniform groups teach a group-relative estimator nothing
  and are dropped, counted, as soon as they complete);
- ``clients``: every active client session has declared its share done.

With a task mix (``task_mix=math:2,code:1``) the size is split into per-task
quotas; a task short of ready episodes makes the batch wait, or is filled in by
other tasks' oldest ready groups (``task_mix_short=fill``).

Pure logic (no torch, no store): the trainer feeds it episodes and sessions.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from swarmrl_server.store.records import EpisodeRecord
from swarmrl_server.trainer.config import TrainerConfig


@dataclass
class Group:
    """Episodes compared with each other (same task and group id)."""

    uid: str
    """Stable id: task, group id and the first episode's id."""
    task_id: str
    episodes: list[EpisodeRecord]
    complete: bool
    model: str = ""
    """The model being trained: its own rewards count (else the episodes')."""
    sealed: bool = False
    """An episode still open would join it: it is not planned (the module's rule)."""

    @property
    def uniform(self) -> bool:
        """Whether every episode got the same reward (for this model)."""
        return len({e.reward_for(self.model) for e in self.episodes}) <= 1

    @property
    def last_end(self) -> float:
        return max(e.end_time or 0.0 for e in self.episodes)


@dataclass
class BatchPlan:
    """The next batch, and episodes the batcher dropped on the way (by reason)."""

    groups: list[Group] = field(default_factory=list)
    dropped: dict[str, list[EpisodeRecord]] = field(default_factory=dict)

    @property
    def episodes(self) -> list[EpisodeRecord]:
        return [e for g in self.groups for e in g.episodes]


def _order(e: EpisodeRecord) -> tuple[float, str]:
    return (e.end_time or 0.0, e.episode_id)


def make_groups(
    episodes: Sequence[EpisodeRecord], group_size: int, model: str = "",
    open_groups: Collection[tuple[str, str]] = (),
) -> list[Group]:
    """Cuts episodes into groups, oldest complete groups first, partial groups last.
    `open_groups`: (task id, group id) of the episodes still open that list `model`;
    the groups those would join are sealed."""
    by_key: dict[tuple[str, str], list[EpisodeRecord]] = {}
    for e in sorted(episodes, key=_order):
        by_key.setdefault((e.task_id, e.group_id), []).append(e)
    groups: list[Group] = []
    for (task_id, group_id), members in by_key.items():
        size = group_size or len(members)
        still_open = (task_id, group_id) in open_groups
        for i in range(0, len(members), size):
            chunk = members[i : i + size]
            uid = f"{task_id}/{group_id}/{chunk[0].episode_id}"
            # An open episode ends after every ended one, so it joins the last chunk.
            full = len(chunk) == size and group_size > 0
            groups.append(Group(uid, task_id, chunk, complete=len(chunk) == size, model=model,
                                sealed=still_open and not full))
    groups.sort(key=lambda g: (not g.complete, g.last_end, g.uid))
    return groups


class Batcher:
    """Decides when the episodes waiting for a model make a batch."""

    def __init__(self, config: TrainerConfig, model: str = "") -> None:
        self.model = model
        self.rule = config.batch_rule
        self.size = config.batch_size
        self.group_size = config.group_size
        self.train_partial = config.partial_groups == "train"
        self.quotas = config.task_quotas()
        self.fill_short = config.task_mix_short == "fill"
        self.declared: set[str] = set()
        """Sessions that declared their share of the current batch done (rule=clients)."""
        self.ready_episodes = 0
        """Episodes in trainable groups at the last `plan` (the selected batch included)."""

    def declare_done(self, session_id: str) -> None:
        self.declared.add(session_id)

    def plan(
        self, episodes: Sequence[EpisodeRecord], active_sessions: Collection[str] = (),
        open_groups: Collection[tuple[str, str]] = (),
    ) -> BatchPlan | None:
        """The batch to train now, or None while it is not ready.

        `open_groups`: (task id, group id) of the episodes still open that list this
        model; the groups they would join are sealed, never planned (the module's rule).
        A plan with no groups but with dropped episodes is returned too, so the caller
        can account for them (mark them consumed, count them).
        """
        plan = BatchPlan()
        ready: list[Group] = []
        waiting = 0
        for g in make_groups(episodes, self.group_size, self.model, open_groups):
            if g.sealed or not (g.complete or self.train_partial):
                waiting += 1
                continue
            if self.rule == "varied_groups" and g.uniform:
                plan.dropped.setdefault("uniform_rewards", []).extend(g.episodes)
                continue
            ready.append(g)
        self.ready_episodes = sum(len(g.episodes) for g in ready)
        plan.groups = self._select(ready, active_sessions)
        if plan.groups and self.rule == "clients":
            self.declared.clear()
        if plan.groups or plan.dropped:
            return plan
        return None

    def _select(self, ready: list[Group], active_sessions: Collection[str]) -> list[Group]:
        if self.quotas:
            return self._select_mix(ready)
        if self.rule == "episodes":
            taken: list[Group] = []
            count = 0
            for g in ready:
                if count >= self.size:
                    break
                taken.append(g)
                count += len(g.episodes)
            return taken if count >= self.size else []
        if self.rule in ("groups", "varied_groups"):
            return ready[: self.size] if len(ready) >= self.size else []
        # clients: everyone still connected has declared; an empty swarm never is "done".
        active = set(active_sessions)
        if self.declared and active <= self.declared:
            return ready
        return []

    def _select_mix(self, ready: list[Group]) -> list[Group]:
        """Each task's quota of its oldest ready groups; a shortfall waits, or is filled
        by the oldest remaining groups of any task."""
        def size(g: Group) -> int:
            return len(g.episodes) if self.rule == "episodes" else 1

        taken: list[Group] = []
        short = 0
        for task, quota in self.quotas.items():
            count = 0
            for g in ready:
                if count >= quota:
                    break
                if g.task_id == task:
                    taken.append(g)
                    count += size(g)
            short += max(quota - count, 0)
        if short and not self.fill_short:
            return []
        if short:
            chosen = {id(g) for g in taken}
            for g in ready:
                if short <= 0:
                    break
                if id(g) not in chosen:
                    taken.append(g)
                    short -= size(g)
            if short > 0:
                return []
        return sorted(taken, key=lambda g: (g.last_end, g.uid))
