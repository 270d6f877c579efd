"""Per-step metrics: TensorBoard, a JSONL file, and a console progress bar.

Names are namespaced: ``reward/…`` (per task too), ``adv/…``, ``loss/…``,
``actor/…`` (verl's own names: pg_clipfrac, ppo_kl, …), ``stale/…`` (versions
behind, per episode, of its oldest span of generated tokens), ``sync/…`` (calls
resumed across a weight sync), ``drop/…`` (episodes dropped, by reason), ``merge/…``
and ``time/…``.
TensorBoard goes to ``<log_dir>/tb/<model>``, JSON lines (one per step, with the
model's name) to ``<log_dir>/metrics.jsonl``.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from swarmrl_server.timelines.merge import MergeStats, Timeline

MAX_TASKS_LOGGED = 32
"""Per-task reward metrics only while a batch has at most this many tasks (keeps TB sane)."""


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return math.nan, math.nan
    t = torch.tensor(values, dtype=torch.float64)
    std = float(t.std(unbiased=False)) if len(values) > 1 else 0.0
    return float(t.mean()), std


def reward_metrics(rewards: Sequence[float], tasks: Sequence[str]) -> dict[str, float]:
    mean, std = mean_std(rewards)
    out = {"reward/mean": mean, "reward/std": std, "reward/episodes": float(len(rewards))}
    by_task: dict[str, list[float]] = {}
    for r, t in zip(rewards, tasks):
        by_task.setdefault(t, []).append(r)
    if len(by_task) <= MAX_TASKS_LOGGED:
        for task, values in sorted(by_task.items()):
            m, s = mean_std(values)
            out[f"reward/{task}/mean"] = m
            out[f"reward/{task}/std"] = s
    return out


def advantage_metrics(advantages_E_L: torch.Tensor, mask_E_L: torch.Tensor) -> dict[str, float]:
    values = advantages_E_L[mask_E_L.bool()]
    if values.numel() == 0:
        return {}
    return {
        "adv/mean": float(values.mean()),
        "adv/std": float(values.std()) if values.numel() > 1 else 0.0,
        "adv/min": float(values.min()), "adv/max": float(values.max()),
        "adv/zero_frac": float((values == 0).float().mean()),
    }


def staleness_metrics(staleness: Sequence[int]) -> dict[str, float]:
    if not staleness:
        return {}
    out = {"stale/mean": sum(staleness) / len(staleness), "stale/max": float(max(staleness))}
    for k, n in sorted(Counter(staleness).items()):
        out[f"stale/hist_{k}"] = float(n)
    return out


def sync_metrics(rows: Sequence[Timeline]) -> dict[str, float]:
    """``sync/resumed_calls``: trained calls whose tokens came from more than one policy
    version (resumed across a weight sync); ``sync/resumed_tokens``: their trained tokens."""
    calls = tokens = 0
    for row in rows:
        versions: dict[int, set[int]] = {}
        counts: dict[int, int] = {}
        for version, mask, call in zip(row.policy_versions, row.loss_mask, row.call_index):
            if mask:
                versions.setdefault(call, set()).add(version)
                counts[call] = counts.get(call, 0) + 1
        resumed = [call for call, vs in versions.items() if len(vs) > 1]
        calls += len(resumed)
        tokens += sum(counts[call] for call in resumed)
    return {"sync/resumed_calls": float(calls), "sync/resumed_tokens": float(tokens)}


def merge_metrics(stats: MergeStats) -> dict[str, float]:
    out = {
        "merge/calls": float(stats.calls), "merge/timelines": float(stats.timelines),
        "merge/forks": float(stats.forks),
        "merge/compression": (
            stats.tokens_per_call / stats.tokens_merged if stats.tokens_merged else 1.0
        ),
    }
    if stats.tokens_packed:  # planned (packing=true): merged tokens / tokens after packing
        out["merge/pack_token_ratio"] = stats.tokens_merged / stats.tokens_packed
    return out


class MetricsWriter:
    """Writes one record per step to TensorBoard and JSONL, and drives the progress bar."""

    def __init__(
        self, model: str, log_dir: Path | None, *, progress: bool, total_steps: int | None,
        initial_step: int = 0,
    ) -> None:
        self.model = model
        self._jsonl = None
        self._tb = None
        self._bar = None
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._jsonl = open(log_dir / "metrics.jsonl", "a", encoding="utf-8")
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(log_dir / "tb" / model))
        if progress:
            from tqdm import tqdm  # type: ignore[import-untyped]

            self._bar = tqdm(total=total_steps or None, initial=initial_step, desc=f"train {model}",
                             unit="step", dynamic_ncols=True)

    def write(self, step: int, metrics: Mapping[str, float], *,
              staleness: Sequence[int] = ()) -> None:
        clean = {k: float(v) for k, v in metrics.items()}
        if self._jsonl is not None:
            record: dict[str, Any] = {"model": self.model, "step": step, "time": time.time()}
            record.update({k: (v if math.isfinite(v) else None) for k, v in clean.items()})
            self._jsonl.write(json.dumps(record) + "\n")
            self._jsonl.flush()
        if self._tb is not None:
            for key, value in clean.items():
                if math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            if staleness:
                self._tb.add_histogram("stale/versions", torch.tensor(list(staleness)), step)
            self._tb.flush()
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(
                reward=f"{clean.get('reward/mean', math.nan):.3f}",
                loss=f"{clean.get('loss/total', math.nan):.4f}",
                v=int(clean.get("actor/policy_version", 0)), refresh=False,
            )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._tb is not None:
            self._tb.close()
        if self._jsonl is not None:
            self._jsonl.close()
