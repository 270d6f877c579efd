"""An evaluation's figures: success rate (Wilson 95%) or mean reward (bootstrap 95%),
overall and per task, pass@k with k samples per item, and the policy versions played."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from swarmrl.envs._api import Split
from swarmrl.envs._stats import bootstrap_mean, wilson

__all__ = ["EvalReport", "RolloutRecord", "read_rollouts"]


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
    """Why the rollout failed ("" when it did not)."""
    seconds: float
    policy_versions: tuple[int, ...] = ()
    """Policy versions of the episode's calls (filled for evaluation rollouts)."""
    trained: bool = False
    """Whether its episode was ended (queued for training); False: aborted."""

    @property
    def ok(self) -> bool:
        return not self.error

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_rollouts(path: Path) -> list[dict[str, Any]]:
    """The rows of a run's ``rollouts.jsonl`` (`RolloutRecord.as_dict` plus its ``time``)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _figures(records: Sequence[RolloutRecord]) -> dict[str, Any]:
    ok = [r for r in records if r.ok]
    out: dict[str, Any] = {"n": len(ok), "errors": len(records) - len(ok)}
    rewards = [r.reward for r in ok if r.reward is not None]
    out["mean_reward"] = round(sum(rewards) / len(rewards), 4) if rewards else None
    out["reward_ci95"] = [round(x, 4) for x in bootstrap_mean(rewards)] if rewards else None
    if ok and all(r.success is not None for r in ok):
        solved = sum(bool(r.success) for r in ok)
        low, high = wilson(solved, len(ok))
        out.update(solved=solved, success_rate=round(solved / len(ok), 4),
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
    """The policy version the evaluation was pinned to (None: not pinned)."""

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

    def pass_at_k(self) -> float | None:
        """The share of items with at least one success among their k rollouts."""
        by_item: dict[str, list[bool]] = defaultdict(list)
        for r in self.records:
            if r.ok and r.success is not None:
                by_item[r.item_id].append(bool(r.success))
        return sum(any(v) for v in by_item.values()) / len(by_item) if by_item else None

    def as_dict(self) -> dict[str, Any]:
        tasks = sorted({r.task for r in self.records})
        out = {"env": self.env, "split": self.split, "k": self.k, **_figures(self.records),
               "policy_versions": self.policy_versions, "pinned_version": self.pinned_version,
               "seconds": round(self.seconds, 1)}
        if self.k > 1:
            out["pass_at_k"] = self.pass_at_k()
        if len(tasks) > 1:
            out["by_task"] = {t: _figures([r for r in self.records if r.task == t])
                              for t in tasks}
        return out

    def __str__(self) -> str:
        f = _figures(self.records)
        if "success_rate" in f:
            low, high = f["success_ci95"]
            head = (f"success {f['success_rate']:.3f} ({f['solved']}/{f['n']}, "
                    f"95% CI {low:.3f}-{high:.3f})")
        elif f["mean_reward"] is not None:
            low, high = f["reward_ci95"]
            head = f"mean reward {f['mean_reward']:.3f} (95% CI {low:.3f}-{high:.3f}, n={f['n']})"
        else:
            head = "no rollout finished"
        versions = self.policy_versions
        tail = f", policy version {versions[0]}" if len(versions) == 1 else (
            f", policy versions {versions}" if versions else "")
        errors = f", {f['errors']} failed" if f["errors"] else ""
        return f"{self.env} {self.split}: {head}{tail}{errors}"

    def rate_or_reward(self) -> float:
        """The headline figure: success rate when defined, else mean reward (nan if none)."""
        rate = self.success_rate
        if rate is not None:
            return rate
        reward = self.mean_reward
        return math.nan if reward is None else reward
