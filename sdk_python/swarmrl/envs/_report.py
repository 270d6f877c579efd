"""A run's figures: an evaluation's success rate (Wilson 95%) or mean reward (bootstrap
95%), overall and per task, pass@k with k samples per item, and the policy versions
played; training's groups, rollouts and rewards.

Failures count, never dropped from a denominator: an evaluation's ``n`` is every
rollout it played, ``failed`` those that failed for good (no outcome). A failed rollout
is not solved, and its reward counts as 0 in the mean (as a `PolicyError`'s default
reward does). ``errors`` counts failures by kind (`swarmrl.envs._failures`: "timeout",
"policy", "environment", "server"; kinds that did not occur are left out), every failed
attempt included, retried or not, and every rollout a `PolicyError` scored.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swarmrl.envs._api import Split
from swarmrl.envs._failures import KINDS
from swarmrl.envs._stats import bootstrap_mean, wilson

__all__ = ["EvalReport", "RolloutRecord", "TrainReport", "read_rollouts"]


@dataclass(frozen=True)
class RolloutRecord:
    """One finished rollout (the last attempt's, for a retried one)."""

    split: Split
    item_id: str
    task: str
    episode_id: str
    group_id: str
    attempt: int
    reward: float | None
    """None when the rollout failed."""
    success: bool | None
    metrics: dict[str, float]
    info: dict[str, Any]
    error: str
    """Why the attempt failed, or the `PolicyError` that scored it ("" when neither)."""
    seconds: float
    policy_versions: tuple[int, ...] = ()
    """Policy versions of the evaluated model's calls (filled for evaluation rollouts; a
    judge's calls to another model are not counted)."""
    trained: bool = False
    """Whether its episode was ended (queued for training); False: aborted."""
    kind: str = ""
    """This attempt's failure kind ("timeout", "policy", "environment", "server"; "" when
    it played cleanly). "policy" with a reward: a `PolicyError` scored it."""
    errors: dict[str, int] = field(default_factory=dict)
    """The failures of this rollout's attempts so far by kind, this one's included (on the
    record of a rollout's last attempt: all of them)."""
    rewards: dict[str, float] = field(default_factory=dict)
    """Each role's reward (an environment with roles; empty for one unnamed role)."""
    role_episodes: dict[str, str] = field(default_factory=dict)
    """Each role's episode id (with roles; `episode_id` is the first role's)."""
    model_versions: dict[str, list[int]] = field(default_factory=dict)
    """`policy_versions` by model (evaluation)."""

    @property
    def ok(self) -> bool:
        """Whether the rollout has an outcome (played cleanly, or scored by a `PolicyError`)."""
        return self.reward is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_rollouts(path: Path) -> list[dict[str, Any]]:
    """The rows of a run's ``rollouts.jsonl`` (`RolloutRecord.as_dict` plus its ``time``)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def count_errors(counts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Failures by kind summed (`RolloutRecord.errors`, say), in `KINDS` order."""
    total: Counter[str] = Counter()
    for errors in counts:
        total.update(errors)
    return {kind: total[kind] for kind in KINDS if total[kind]} | {
        kind: n for kind, n in sorted(total.items()) if kind not in KINDS and n}


def _figures(records: Sequence[RolloutRecord]) -> dict[str, Any]:
    n = len(records)
    finished = [r for r in records if r.ok]
    out: dict[str, Any] = {"n": n, "failed": n - len(finished), "errors": count_errors(r.errors for r in records)}
    rewards = [r.reward if r.reward is not None else 0.0 for r in records]  # failed: 0
    out["mean_reward"] = round(sum(rewards) / n, 4) if n else None
    out["reward_ci95"] = [round(x, 4) for x in bootstrap_mean(rewards)] if n else None
    clean = [r for r in finished if not r.kind]
    if clean and all(r.success is not None for r in clean):
        solved = sum(r.success is True for r in records)
        low, high = wilson(solved, n)
        out.update(solved=solved, success_rate=round(solved / n, 4),
                   success_ci95=[round(low, 4), round(high, 4)])
    return out


@dataclass(frozen=True)
class EvalReport:
    """What `Runner.evaluate` measured on one split."""

    env: str
    split: str
    k: int
    records: list[RolloutRecord]
    seconds: float
    pinned_version: int | None = None
    """The policy version the evaluation was pinned to (None: not pinned); with several
    models pinned, the first's (`pinned_versions` has each)."""
    pinned_versions: dict[str, int] = field(default_factory=dict)
    """Each pinned model's version (an evaluation of roles pins every model it plays)."""

    def by_role(self) -> dict[str, dict[str, Any]]:
        """Each role's mean reward over every rollout (a failed one counts 0) and its CI;
        empty for an environment without roles."""
        roles = sorted({r for rec in self.records for r in rec.rewards})
        out: dict[str, dict[str, Any]] = {}
        for role in roles:
            rewards = [rec.rewards.get(role, 0.0) for rec in self.records]
            out[role] = {"mean_reward": round(sum(rewards) / len(rewards), 4),
                         "reward_ci95": [round(x, 4) for x in bootstrap_mean(rewards)]}
        return out

    @property
    def policy_versions(self) -> list[int]:
        """Every policy version that generated a token of this evaluation."""
        return sorted({v for r in self.records for v in r.policy_versions})

    @property
    def success_rate(self) -> float | None:
        """The share of successful rollouts (None when the environment defines no success)."""
        rate = _figures(self.records).get("success_rate")
        return None if rate is None else float(rate)

    @property
    def mean_reward(self) -> float | None:
        value = _figures(self.records)["mean_reward"]
        return None if value is None else float(value)

    @property
    def errors(self) -> dict[str, int]:
        """Failures by kind, every attempt's (see the module docstring)."""
        return count_errors(r.errors for r in self.records)

    def pass_at_k(self) -> float | None:
        """The share of items with at least one success among their k rollouts (every
        item played counts, those whose rollouts all failed too; None when the
        environment defines no success)."""
        if "success_rate" not in _figures(self.records):
            return None
        by_item: dict[str, list[bool]] = defaultdict(list)
        for r in self.records:
            by_item[r.item_id].append(r.success is True)
        return sum(any(v) for v in by_item.values()) / len(by_item) if by_item else None

    def as_dict(self) -> dict[str, Any]:
        tasks = sorted({r.task for r in self.records})
        out = {"env": self.env, "split": self.split, "k": self.k, **_figures(self.records),
               "policy_versions": self.policy_versions, "pinned_version": self.pinned_version,
               "seconds": round(self.seconds, 1)}
        if self.k > 1:
            out["pass_at_k"] = self.pass_at_k()
        if self.pinned_versions:
            out["pinned_versions"] = dict(self.pinned_versions)
        by_role = self.by_role()
        if by_role:
            out["by_role"] = by_role
        if len(tasks) > 1:
            out["by_task"] = {t: _figures([r for r in self.records if r.task == t])
                              for t in tasks}
        return out

    def __str__(self) -> str:
        f = _figures(self.records)
        if f["n"] == f["failed"]:
            head = f"no rollout finished (n={f['n']})"
        elif "success_rate" in f:
            low, high = f["success_ci95"]
            head = (f"success {f['success_rate']:.3f} ({f['solved']}/{f['n']}, "
                    f"95% CI {low:.3f}-{high:.3f})")
        else:
            low, high = f["reward_ci95"]
            head = f"mean reward {f['mean_reward']:.3f} (95% CI {low:.3f}-{high:.3f}, n={f['n']})"
        versions = self.policy_versions
        tail = f", policy version {versions[0]}" if len(versions) == 1 else (
            f", policy versions {versions}" if versions else "")
        failed = f", {f['failed']} failed" if f["failed"] else ""
        errors = (", errors: " + ", ".join(f"{k} {n}" for k, n in f["errors"].items())
                  if f["errors"] else "")
        return f"{self.env} {self.split}: {head}{tail}{failed}{errors}"

    def rate_or_reward(self) -> float:
        """The headline figure: success rate when defined, else mean reward (nan if none)."""
        rate = self.success_rate
        if rate is not None:
            return rate
        reward = self.mean_reward
        return math.nan if reward is None else reward


@dataclass
class TrainReport:
    """What `Runner.train` played."""

    groups: int = 0
    """Groups ended (queued for training)."""
    groups_aborted: int = 0
    """Groups aborted because a rollout failed for good."""
    rollouts: int = 0
    failed_attempts: int = 0
    """Attempts that failed (each aborted; retried or not)."""
    skipped_held_out: int = 0
    """Train items skipped because their content is a val or test item's."""
    rollouts_lost: int = 0
    """Rollouts of a group that could not be ended whole that were ended (trained) anyway:
    the server aborted one of their siblings first (a lapsed lease)."""
    seconds: float = 0.0
    rewards: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    """Failures by kind (see the module docstring): every failed attempt, every rollout a
    `PolicyError` scored (trained with its reward), every episode that could not be ended
    ("server")."""

    def count(self, errors: Mapping[str, int]) -> None:
        """Adds failures by kind."""
        self.errors = count_errors([self.errors, errors])

    def add(self, other: TrainReport) -> None:
        """Adds another stretch of training (a run trains in stretches between evaluations)."""
        for name in ("groups", "groups_aborted", "rollouts", "failed_attempts", "rollouts_lost",
                     "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.skipped_held_out = other.skipped_held_out  # the runner's running count
        self.rewards += other.rewards
        self.count(other.errors)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        rewards = out.pop("rewards")
        out["mean_reward"] = sum(rewards) / len(rewards) if rewards else None
        return out
