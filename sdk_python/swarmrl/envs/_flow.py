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
what was measured, and a run started again on its folder resumes from its card
(`_runfolder`): evaluations done are not played again, training goes on for what is left of
its budget with its totals added to the earlier ones (`merge_totals`), val after is not
repeated once recorded (training is then over), and test is never played twice: the
card records ``test_started`` before the first test rollout, and a resumed run that
finds it without a finished test records the test as interrupted instead of playing it.

Roles (`swarmrl.envs._roles`): every hold pins all the models the roles play at once,
each evaluation records each model's version (``pinned_versions``), and every model the
run trains is checkpointed under that hold (``checkpoints``, by model) and restored
together for test, so the pair tested is the pair evaluated.

Checkpoints: each evaluated version is checkpointed; after each evaluation those that
are neither the best by val so far nor the latest are deleted (`prune_checkpoints`),
so a run keeps two, not one per evaluation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from swarmrl._errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from swarmrl.envs._api import Split
from swarmrl.envs._card import split_digest
from swarmrl.envs._failures import PinLost
from swarmrl.envs._rollout import cleanup
from swarmrl.envs._runner import Runner, TrainReport

PIN_REPLAYS = 2
"""How many times a val evaluation a server restart cut (`PinLost`) is played again."""

__all__ = ["Budget", "EmptySplit", "evaluate_once", "merge_totals", "prune_checkpoints",
           "train_and_test"]


class EmptySplit(ValueError):
    """A split the run would evaluate has no items: refused before anything is played
    (its evaluation would report nothing, not a figure)."""


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


async def _checkpoint(runner: Runner) -> tuple[dict[str, str], str]:
    """A checkpoint of the served weights of every model the run trains (call it inside
    a hold), by model ("" : the one model), or none and why not."""
    paths: dict[str, str] = {}
    for model in runner.config.trained_models(runner.env):
        try:
            saved = await runner.client.save_checkpoint(model or None)
        except (FailedPreconditionError, PermissionDeniedError) as err:
            return {}, str(err)
        if saved:
            paths[model] = saved[0]
    return paths, ""


def _checkpoints(e: dict[str, Any]) -> dict[str, str]:
    """An evaluation's checkpoints by model (a one-model run's card has ``checkpoint``)."""
    return e.get("checkpoints") or {"": e["checkpoint"]}


def splits_record(runner: Runner, evaluate_test: bool, *,
                  needed: tuple[tuple[Split, str], ...] = ()) -> dict[str, Any]:
    """Each held-out split's size and content hash (test's digests are read for the split
    check; its items are played only by the one test evaluation). `needed`: the splits
    the run will evaluate, each with what to do instead; an empty one raises
    `EmptySplit`."""
    out: dict[str, Any] = {}
    names: tuple[Split, ...] = ("val", "test")
    for name in names:
        items = runner.held_out(name)
        out[name] = {"items": len(items), "sha256": split_digest(items)}
    out["test"]["evaluated"] = evaluate_test
    for name, instead in needed:
        if not out[name]["items"]:
            raise EmptySplit(f"{runner.env.label}: the {name} split has no items, so it "
                             f"cannot be evaluated; {instead}")
    return out


def merge_totals(a: dict[str, Any] | None, b: dict[str, Any]) -> dict[str, Any]:
    """Training totals of two runs of one run folder (`TrainReport.as_dict` each, with
    ``rewarded``, the number of rewards its mean is over): counts and seconds add,
    counts by kind add by kind, the mean reward is weighted by ``rewarded``.
    ``skipped_held_out`` adds too: each start's runner counts its own skips."""
    if not a:
        return dict(b)
    out = dict(a)
    for key, value in b.items():
        mine = out.get(key)
        if key == "mean_reward":
            continue
        if isinstance(value, bool) or value is None:
            out[key] = value if mine is None else mine
        elif isinstance(value, (int, float)):
            out[key] = (mine or 0) + value
        elif isinstance(value, dict):
            merged = dict(mine or {})
            for kind, count in value.items():
                merged[kind] = merged.get(kind, 0) + count
            out[key] = merged
        else:
            out[key] = value
    n_a, n_b = int(a.get("rewarded") or 0), int(b.get("rewarded") or 0)
    sums = [(d.get("mean_reward") or 0.0) * n for d, n in ((a, n_a), (b, n_b))]
    out["mean_reward"] = (sum(sums) / (n_a + n_b)) if n_a + n_b else None
    return out


def _totals(report: TrainReport) -> dict[str, Any]:
    out = report.as_dict()
    out["rewarded"] = len(report.rewards)
    return out


def best_by_val(evals: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The val evaluation with a checkpoint that selection picks: the best headline
    figure; ties go to the earlier version."""
    candidates = [e for e in evals if e["split"] == "val" and e.get("checkpoint")
                  and not e.get("checkpoint_deleted")]
    if not candidates:
        return None
    return max(candidates, key=lambda e: (headline(e["figures"]), -e["pinned_version"]))


async def prune_checkpoints(runner: Runner, evals: list[dict[str, Any]]) -> None:
    """Deletes the evaluated checkpoints that are neither the best by val so far nor the
    latest (each marked ``checkpoint_deleted`` in its evaluation's record). One the
    server refuses to delete is kept (and the refusal recorded with it)."""
    kept = [e for e in evals if e.get("checkpoint") and not e.get("checkpoint_deleted")]
    if not kept:
        return
    best, latest = best_by_val(evals), kept[-1]
    for e in kept:
        if e is best or e is latest or "checkpoint_kept" in e:
            continue
        try:
            for model, path in _checkpoints(e).items():
                await runner.client.delete_checkpoint(path, model or runner.config.model or None)
        except NotFoundError:
            pass  # gone already (a retry after a lost answer, or removed by hand)
        except (FailedPreconditionError, InvalidArgumentError, PermissionDeniedError) as err:
            e["checkpoint_kept"] = str(err)
            continue
        e["checkpoint_deleted"] = True


async def evaluate_once(runner: Runner, name: str | None, split: Split, *,
                        limit: int | None = None, k: int = 1, checkpoint: bool = False,
                        train_seconds: float | None = None) -> dict[str, Any]:
    """One pinned evaluation (and, with `checkpoint`, a checkpoint under the same hold);
    `name` None names it after the version it pinned ("v12"). `train_seconds`, the
    training wall time so far (evaluations excluded), is recorded with it: what a learning
    curve over wall-clock minutes is drawn against."""
    replayed: list[str] = []
    orphans: list[tuple[str, str]] = []
    while True:
        paths: dict[str, str] = {}
        try:
            async with runner.pinned(f"{split} evaluation {name or ''}") as version:
                report = await runner.evaluate(split, k=k, limit=limit)
                paths, why = await _checkpoint(runner) if checkpoint else ({}, "")
                pins = runner.pins
        except PinLost as lost:
            # A val evaluation a server restart cut is played again under a fresh hold (a
            # bounded number of times); test is played once (`_test_once` records it cut).
            orphans += paths.items()  # saved on the restarted server: not the pin's weights
            if split == "test" or len(replayed) == PIN_REPLAYS:
                raise
            replayed.append(str(lost))
            print(f"[{name or split}] played again: {lost}", flush=True)
            continue
        break
    for model, path in orphans:  # older than the replay's own now (the newest is kept)
        await cleanup(runner.client.delete_checkpoint(path, model or runner.config.model
                                                      or None))
    name = name or f"v{version}"
    print(f"[{name}] {report}", flush=True)
    record = {"name": name, "split": split, "pinned_version": version,
              "figures": report.as_dict(), "checkpoint": next(iter(paths.values()), None)}
    if len(pins) > 1:
        record["pinned_versions"] = pins
    if len(paths) > 1:
        record["checkpoints"] = paths
    if train_seconds is not None:
        record["train_seconds"] = round(train_seconds, 1)
    if why:
        record["no_checkpoint"] = why
    if replayed:
        record["replayed_after"] = replayed
    return record


async def train_and_test(runner: Runner, card: dict[str, Any], save: Callable[[], None], *,
                         budget: Budget, eval_every: int, eval_limit: int | None,
                         val: bool, test: bool) -> None:
    """Steps 1-5 of the module docstring; fills `card` (``evals``, ``train``,
    ``selected``, ``test_started``, ``test``, ``finished``) and calls `save` after each
    change. A `card` a resumed run carried over goes on from where it stopped."""
    evals: list[dict[str, Any]] = card.setdefault("evals", [])
    needed: list[tuple[Split, str]] = []
    if val:
        needed.append(("val", "give the environment val items, or pass --no-val"))
    if test and "test_started" not in card:
        needed.append(("test", "give the environment test items, or pass --no-test"))
    card["splits"] = splits_record(runner, test, needed=tuple(needed))
    # A resumed run adds this start's training (`total`, stretches added as the runner
    # adds them) to the earlier starts' totals (`carried`), and its training clock counts
    # on from theirs.
    carried, total = card.get("train"), TrainReport()
    clock = max([float((carried or {}).get("seconds") or 0.0)]
                + [e.get("train_seconds", 0.0) for e in evals])

    async def evaluate_val(name: str | None) -> None:
        evals.append(await evaluate_once(runner, name, "val", limit=eval_limit,
                                         checkpoint=True, train_seconds=clock))
        save()
        await prune_checkpoints(runner, evals)
        save()

    if val and not any(e["name"] == "before" for e in evals):
        await evaluate_val("before")
    trained = any(e["name"] == "after" for e in evals)  # recorded: training is over
    while not trained and not budget.spent:
        until = (await runner.policy_version()) + eval_every if eval_every else None
        stretch = await runner.train(groups=budget.groups, seconds=budget.seconds(),
                                     until_version=until)
        clock += stretch.seconds
        if budget.groups is not None:
            budget.groups = max(0, budget.groups - stretch.groups - stretch.groups_aborted)
        total.add(stretch)
        card["train"] = merge_totals(carried, _totals(total))
        card["train_saved"] = time.time()  # rows after it: a stretch a kill cut short
        save()
        if val and eval_every and not budget.spent:
            await evaluate_val(None)
        if stretch.groups + stretch.groups_aborted == 0:
            break  # nothing left to play (a finite train split ran out)
    if val and not trained:
        await evaluate_val("after")
    if test:
        await _test_once(runner, card, evals, save)
    card["finished"] = True
    save()


async def _test_once(runner: Runner, card: dict[str, Any], evals: list[dict[str, Any]],
                     save: Callable[[], None]) -> None:
    """Step 5: the selected checkpoint served again and test played on it, once."""
    if "test" in card:
        return
    started = card.get("test_started")
    if started:  # an earlier start began the test and was stopped before it ended
        card["test"] = {**started, "interrupted": True,
                        "why": "the run stopped during its test evaluation; test is played "
                               "once per run, so the resumed run did not play it again "
                               "(the rollouts it finished are in rollouts.jsonl)"}
        save()
        return
    # One hold from the restore to the end of the test: no step lands in between.
    try:
        async with runner.pinned("test on the selected checkpoint") as version:
            best = best_by_val(evals)
            if best is not None:
                card["selected"] = {
                    "name": best["name"], "pinned_version": best["pinned_version"],
                    "checkpoint": best["checkpoint"], "val_figures": best["figures"],
                    "by": "val success rate (else mean reward); ties: the earlier version"}
                if best["pinned_version"] != version or best.get(
                        "pinned_versions", runner.pins) != runner.pins:
                    try:
                        for i, (model, path) in enumerate(_checkpoints(best).items()):
                            restored = await runner.restore(path, model or None)
                            version = restored if i == 0 else version
                    except (InvalidArgumentError, FailedPreconditionError) as err:
                        card["selected"]["restore_failed"] = str(err)
                        save()
                        raise
                    card["selected"]["restored_as_version"] = version
            else:
                card["selected"] = {"name": "current", "pinned_version": version,
                                    "why": "no val checkpoint to choose from"}
            card["test_started"] = {"name": "test", "split": "test", "pinned_version": version,
                                    "started": time.time()}
            save()  # before the first test rollout: a resumed run never plays test again
            card["test"] = await evaluate_once(runner, "test", "test")
    except PinLost as lost:  # the server restarted during the test: its pin was lost
        card["test"] = {**card.get("test_started", {}), "interrupted": True,
                        "why": f"{lost}; test is played once per run, so it was not played "
                               "again (the rollouts it finished are in rollouts.jsonl)"}
    save()
