"""A run's progress from its metrics, and the rules that end it: stop rules and budgets.

The trainer appends one JSON object per step to ``<data dir>/metrics.jsonl``
(`trainer/metrics.py`), writing non-finite values as null; a restarted server
continues after the highest step it ever logged, so steps only increase. Everything
here is a pure function of those rows, so it is the same for a run supervised by
`study run` and by a Ray job, and for the report.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmrl_server.study.schema import Budget, Metric, StopRules

Row = dict[str, Any]


class MetricsTail:
    """Reads a metrics.jsonl as it grows; a line still being written waits for its end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[Row] = []
        self._offset = 0

    def poll(self) -> list[Row]:
        """The rows appended since the last poll."""
        if not self.path.is_file():
            return []
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        new = [json.loads(line) for line in data[:end].splitlines() if line.strip()]
        self.rows += new
        return new


def read_rows(data_dir: Path) -> list[Row]:
    tail = MetricsTail(data_dir / "metrics.jsonl")
    tail.poll()
    return tail.rows


def _finite(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


@dataclass(frozen=True)
class Progress:
    step: int = 0
    metric: float | None = None
    """The final value: the mean over the last `Metric.final_window` steps reporting it."""
    best: float | None = None
    best_step: int = 0


def progress(rows: list[Row], metric: Metric) -> Progress:
    step, best, best_step = 0, None, 0
    values: list[float] = []
    sign = 1.0 if metric.direction == "max" else -1.0
    for row in rows:
        step = max(step, int(row.get("step", 0)))
        value = _finite(row.get(metric.name))
        if value is None:
            continue
        values.append(value)
        if best is None or sign * value > sign * best:
            best, best_step = value, int(row["step"])
    tail = values[-metric.final_window:]
    final = sum(tail) / len(tail) if tail else None
    return Progress(step, final, best, best_step)


def curve(rows: list[Row], name: str) -> tuple[list[int], list[float]]:
    points = [(int(r["step"]), _finite(r.get(name))) for r in rows]
    kept = [(s, v) for s, v in points if v is not None]
    return [s for s, _ in kept], [v for _, v in kept]


def stop_reason(rows: list[Row], rules: StopRules) -> str | None:
    """Why the run must stop now, or None."""
    if rules.nan_loss:
        for row in rows:
            if "loss/total" in row and _finite(row["loss/total"]) is None:
                return f"stop rule nan_loss: loss/total is not finite at step {row['step']}"
    collapse = rules.entropy_collapse
    if collapse is not None:
        _, entropy = curve(rows, "actor/entropy")
        tail = entropy[-collapse.steps:]
        if len(tail) == collapse.steps and all(e < collapse.below for e in tail):
            return (f"stop rule entropy_collapse: actor/entropy below {collapse.below:g} for "
                    f"{collapse.steps} steps (last {tail[-1]:.4g})")
    floor = rules.reward_floor
    if floor is not None:
        steps, values = curve(rows, floor.metric)
        if steps and steps[-1] >= floor.after_steps and len(values) >= floor.window:
            mean = sum(values[-floor.window:]) / floor.window
            if mean < floor.value:
                return (f"stop rule reward_floor: {floor.metric} {mean:.4g} < {floor.value:g} "
                        f"at step {steps[-1]} (after {floor.after_steps})")
    return None


def budget_reason(budget: Budget, *, step: int, episodes: int, wall_s: float) -> str | None:
    """Which budget the run has used up, or None."""
    if budget.steps is not None and step >= budget.steps:
        return f"budget: {step} steps (of {budget.steps})"
    if budget.episodes is not None and episodes >= budget.episodes:
        return f"budget: {episodes} episodes (of {budget.episodes})"
    if budget.wall_s is not None and wall_s >= budget.wall_s:
        return f"budget: {wall_s:.0f} s wall time (of {budget.wall_s:g})"
    return None
