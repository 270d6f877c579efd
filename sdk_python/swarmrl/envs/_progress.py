"""The runner's progress: a rich bar (episodes/s, mean reward of the last 200, failed
rollouts, served policy version), or a plain line every 30 s when stderr is not a
terminal (logs, CI)."""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from swarmrl.envs._report import RolloutRecord


class _Served(Protocol):
    """What the bar asks of its runner: the policy version served now."""

    async def policy_version(self) -> int: ...

__all__ = ["Progress"]


class Progress:
    """A rich progress bar (episodes/s, mean reward of the last 200, policy version);
    a plain line every 30 s when stderr is not a terminal."""

    def __init__(self, runner: _Served, label: str, *, enabled: bool, total: int | None = None,
                 seconds: float | None = None) -> None:
        self._runner = runner
        self._label = label
        self._total_groups = total
        self._seconds = seconds
        self._rewards: deque[float] = deque(maxlen=200)
        self._episodes = 0
        self._failed = 0
        self._t0 = time.monotonic()
        self._last_line = 0.0
        self._last_version_poll = 0.0
        self._version = -1
        self._enabled = enabled
        self._tty = sys.stderr.isatty()
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self._enabled and self._tty:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.fields[stats]}"))
            self._bar.start()
            self._task = self._bar.add_task(self._label, total=self._total_groups, stats="")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
        elif self._enabled:
            self._line()

    def add(self, records: Sequence[RolloutRecord]) -> None:
        self._episodes += len(records)
        self._failed += sum(not r.ok for r in records)
        self._rewards.extend(r.reward for r in records if r.reward is not None)
        if self._bar is not None:
            self._bar.update(self._task, advance=1 if self._label.endswith("train")
                             else len(records), stats=self._stats())
        elif self._enabled and time.monotonic() - self._last_line > 30:
            self._line()

    async def refresh(self) -> None:
        """Polls the served policy version (at most every 5 s)."""
        if not self._enabled or time.monotonic() - self._last_version_poll < 5:
            return
        self._last_version_poll = time.monotonic()
        with contextlib.suppress(Exception):
            self._version = await self._runner.policy_version()
        if self._bar is not None:
            self._bar.update(self._task, stats=self._stats())

    def _stats(self) -> str:
        elapsed = max(time.monotonic() - self._t0, 1e-9)
        mean = sum(self._rewards) / len(self._rewards) if self._rewards else math.nan
        version = self._version
        return (f"{self._episodes} episodes  {self._episodes / elapsed:.2f} ep/s  "
                f"reward {mean:.3f}" + (f"  {self._failed} failed" if self._failed else "")
                + (f"  v{version}" if version >= 0 else ""))

    def _line(self) -> None:
        self._last_line = time.monotonic()
        print(f"[{self._label}] {time.monotonic() - self._t0:6.0f}s  {self._stats()}",
              file=sys.stderr, flush=True)
