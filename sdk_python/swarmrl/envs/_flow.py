"""What ``swarmrl train`` does between starting and stopping: evaluate val on pinned
versions, train in stretches, keep the best checkpoint by val, test it once.

1. **val before** training, pinned (`Runner.pinned`: the model's training is held, so
   every call plays one policy version), and a checkpoint of that version;
2. **training** in stretches of ``eval_every`` policy versions (or one stretch), each
   followed by a pinned val evaluation and a checkpoint taken under the same hold (so
   the checkpoint holds exactly the weights that were evaluated);
3. **val after**, the same;
4. **selection**: the evaluation with the best val figure (success rate, else mean
   reward; ties go to the earlier version), never a test figure;
5. **test, once**: the selected checkpoint is served again (``RestoreCheckpoint``) unless
   it is the current version, and the test split is played on it, pinned. Nothing
   else in a run reads the test split (the runner's split check reads test items'
   digests only, to keep them out of training).

Every evaluation lands in the card as it finishes (`save` is called), so a crash keeps
what was measured.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from swarmrl._errors import FailedPreconditionError, InvalidArgumentError, PermissionDeniedError
from swarmrl.envs._api import Split
from swarmrl.envs._card import split_digest
from swarmrl.envs._runner import Runner, TrainReport

__all__ = ["Budget", "evaluate_once", "train_and_test"]


@dataclass
class Budget:
    """How much training is left: wall clock (a deadline) and/or groups."""

    deadline: float | None = None
    """A ``time.time()``; None: no time limit."""
    groups: int | None = None
    """Groups left to play; None: no group limit."""

    def seconds(self) -> float | None:
        return None if self.deadline is None else max(0.0, self.deadline - time.time())

    @property
    def spent(self) -> bool:
        return self.seconds() == 0.0 or self.groups == 0


def headline(figures: dict[str, Any]) -> float:
    """The figure selection compares: success rate when defined, else mean reward."""
    value = figures.get("success_rate")
    if value is None:
        value = figures.get("mean_reward")
    return -math.inf if value is None else float(value)


async def _checkpoint(runner: Runner) -> tuple[str | None, str]:
    """A checkpoint of the served weights (call it inside a hold), or None and why not."""
    try:
        paths = await runner.client.save_checkpoint(runner.config.model or None)
    except (FailedPreconditionError, PermissionDeniedError) as err:
        return None, str(err)
    return (paths[0] if paths else None), ""


def splits_record(runner: Runner, evaluate_test: bool) -> dict[str, Any]:
    """Each held-out split's size and content hash (test's digests are read for the split
    check; its items are played only by the one test evaluation)."""
    out: dict[str, Any] = {}
    names: tuple[Split, ...] = ("val", "test")
    for name in names:
        items = runner.held_out(name)
        out[name] = {"items": len(items), "sha256": split_digest(items)}
    out["test"]["evaluated"] = evaluate_test
    return out


async def evaluate_once(runner: Runner, name: str | None, split: Split, *,
                        limit: int | None = None, k: int = 1, checkpoint: bool = False,
                        train_seconds: float | None = None) -> dict[str, Any]:
    """One pinned evaluation (and, with `checkpoint`, a checkpoint under the same hold);
    `name` None names it after the version it pinned ("v12"). `train_seconds`, the
    training wall time so far (evaluations excluded), is recorded with it: what a learning
    curve over wall-clock minutes is drawn against."""
    async with runner.pinned(f"{split} evaluation {name or ''}") as version:
        name = name or f"v{version}"
        report = await runner.evaluate(split, k=k, limit=limit)
        path, why = await _checkpoint(runner) if checkpoint else (None, "")
    print(f"[{name}] {report}", flush=True)
    record = {"name": name, "split": split, "pinned_version": version,
              "figures": report.as_dict(), "checkpoint": path}
    if train_seconds is not None:
        record["train_seconds"] = round(train_seconds, 1)
    if why:
        record["no_checkpoint"] = why
    return record


async def train_and_test(runner: Runner, card: dict[str, Any], save: Callable[[], None], *,
                         budget: Budget, eval_every: int, eval_limit: int | None,
                         val: bool, test: bool) -> None:
    """Steps 1-5 of the module docstring; fills `card` (``evals``, ``train``,
    ``selected``, ``test``) and calls `save` after each change."""
    evals: list[dict[str, Any]] = card.setdefault("evals", [])
    card["splits"] = splits_record(runner, test)
    total = TrainReport()
    # A resumed run counts on from its last evaluation's training time (what it trained
    # after that evaluation, before it stopped, is not counted).
    total.seconds = max((e.get("train_seconds", 0.0) for e in evals), default=0.0)
    if val and not any(e["name"] == "before" for e in evals):  # kept by a resumed run
        evals.append(await evaluate_once(runner, "before", "val", limit=eval_limit,
                                         checkpoint=True, train_seconds=0.0))
        save()
    while not budget.spent:
        until = (await runner.policy_version()) + eval_every if eval_every else None
        stretch = await runner.train(groups=budget.groups, seconds=budget.seconds(),
                                     until_version=until)
        total.add(stretch)
        if budget.groups is not None:
            budget.groups = max(0, budget.groups - stretch.groups - stretch.groups_aborted)
        card["train"] = total.as_dict()
        save()
        if val and eval_every and not budget.spent:
            evals.append(await evaluate_once(runner, None, "val", limit=eval_limit,
                                             checkpoint=True, train_seconds=total.seconds))
            save()
        if stretch.groups + stretch.groups_aborted == 0:
            break  # nothing left to play (a finite train split ran out)
    if val:
        evals.append(await evaluate_once(runner, "after", "val", limit=eval_limit,
                                         checkpoint=True, train_seconds=total.seconds))
        save()
    if not test:
        return
    candidates = [e for e in evals if e["split"] == "val" and e.get("checkpoint")]
    # One hold from the restore to the end of the test: no step lands in between.
    async with runner.pinned("test on the selected checkpoint") as version:
        if candidates:
            best = max(candidates, key=lambda e: (headline(e["figures"]), -e["pinned_version"]))
            card["selected"] = {
                "name": best["name"], "pinned_version": best["pinned_version"],
                "checkpoint": best["checkpoint"], "val_figures": best["figures"],
                "by": "val success rate (else mean reward); ties: the earlier version"}
            if best["pinned_version"] != version:
                try:
                    card["selected"]["restored_as_version"] = await runner.restore(
                        best["checkpoint"])
                except (InvalidArgumentError, FailedPreconditionError) as err:
                    card["selected"]["restore_failed"] = str(err)
                    save()
                    raise
            save()
        else:
            card["selected"] = {"name": "current", "pinned_version": version,
                                "why": "no val checkpoint to choose from"}
        card["test"] = await evaluate_once(runner, "test", "test")
    save()
