"""A run folder (``--out``) as the state a ``swarmrl train`` started again resumes from.

The card (``card.json``, replaced atomically: `_card.write`) is the state: the
evaluations done, the training totals, ``test_started`` / ``test``, the deadline's
start (``train_started``), the run's ``holder`` and each start of the run
(``starts``). ``rollouts.jsonl`` is appended as rollouts finish. A run started again on
its folder:

- keeps its first start's command (``argv``, what ``--from-card`` repeats) and
  deadline, and its evaluations;
- adds the training of every start: the totals saved after each stretch, plus, for a
  stretch a kill cut short (not in the card), what ``rollouts.jsonl`` holds of it
  (`cut_stretch`), so the card's totals count every group the server trained;
- holds training as the same holder (`holder`, derived from the folder), so the server
  keeps one hold for the run: a hold of its dead first start is adopted, not stacked;
- lists the rows of an evaluation a kill cut short (``cut_evaluations``, by split and
  time span): `swarmrl compare` leaves them out, and an interrupted test's are named;
- keeps how each earlier start ended (``stopped``, ``refused``) in its ``starts`` entry;
- plays nothing once ``finished``.
"""

from __future__ import annotations

import copy
import hashlib
import time
from pathlib import Path
from typing import Any

from swarmrl.envs import _card
from swarmrl.envs._flow import Budget, merge_totals
from swarmrl.envs._report import read_rollouts

__all__ = ["budget", "carry_over", "cut_evaluations", "cut_stretch", "holder"]

CARRIED = ("argv", "evals", "train", "train_started", "train_saved", "selected",
           "test_started", "test", "holder", "starts", "cut_evaluations")
"""What a resumed run's card keeps from the card it resumes."""


def holder(out: Path) -> str:
    """The training holder of the run in `out`: the same for every start of the run."""
    return "swarmrl-run-" + hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:12]


def carry_over(previous: dict[str, Any] | None, card: dict[str, Any], out: Path,
               argv: list[str]) -> None:
    """Fills a new start's `card` from the `previous` card of its folder (None: the first
    start), recording this start in ``starts``."""
    for key in CARRIED:
        if previous and key in previous:
            card[key] = copy.deepcopy(previous[key])
    card.setdefault("holder", holder(out))
    card.setdefault("starts", [])
    if previous and card["starts"]:  # how the previous start ended stays on record
        for key in ("stopped", "refused"):
            if key in previous:
                card["starts"][-1][key] = previous[key]
    card["starts"].append({"at": _card.stamp(), "argv": argv})
    if previous:
        cut = cut_stretch(out / "rollouts.jsonl", float(previous.get("train_saved") or 0.0))
        if cut:
            card["train"] = merge_totals(card.get("train"), cut)
            card["train_saved"] = time.time()
            card["starts"][-1]["found_cut_stretch"] = cut
        saved = previous.get("saved_at")
        for found in cut_evaluations(out / "rollouts.jsonl", float(saved or 0.0)):
            card.setdefault("cut_evaluations", []).append(found)


def cut_stretch(rollouts: Path, since: float) -> dict[str, Any] | None:
    """The training a stopped start did after its card last saved totals (`since`, a
    ``time.time()``), from ``rollouts.jsonl``: groups with a trained rollout, trained
    rollouts and their rewards, failed attempts. None when there is none."""
    if not rollouts.is_file():
        return None
    rows = [r for r in read_rollouts(rollouts)
            if r.get("split") == "train" and float(r.get("time", 0.0)) > since]
    if not rows:
        return None
    trained = [r for r in rows if r.get("trained")]
    groups = {r["group_id"] for r in trained}
    rewards = [float(r["reward"]) for r in trained if r.get("reward") is not None]
    times = [float(r["time"]) for r in rows]
    return {"groups": len(groups), "rollouts": len(trained),
            "failed_attempts": sum(1 for r in rows if r.get("error")),
            "seconds": round(max(times) - min(times) + float(rows[0].get("seconds", 0.0)), 1),
            "rewarded": len(rewards),
            "mean_reward": sum(rewards) / len(rewards) if rewards else None,
            "cut_by_restart": True}


def cut_evaluations(rollouts: Path, since: float) -> list[dict[str, Any]]:
    """The rows of val and test evaluations a stopped start played after its card's last
    save (`since`): an evaluation it never recorded. Each split's are listed with the
    time span they lie in, so `swarmrl compare` leaves them out of the evaluations the
    card records (and a test's partial rows are named as such)."""
    if not since or not rollouts.is_file():
        return []
    found = []
    for split in ("val", "test"):
        times = [float(r["time"]) for r in read_rollouts(rollouts)
                 if r.get("split") == split and float(r.get("time", 0.0)) > since]
        if times:
            found.append({"split": split, "after": since, "until": max(times),
                          "rows": len(times)})
    return found


def budget(card: dict[str, Any], minutes: float | None, groups: int | None) -> Budget:
    """What is left of ``--minutes`` (from the first start: ``train_started``) and of
    ``--groups`` (less the groups played so far, ended or aborted)."""
    deadline = None
    if minutes is not None:
        card.setdefault("train_started", time.time())
        deadline = float(card["train_started"]) + minutes * 60
    if groups is not None:
        done = card.get("train") or {}
        groups = max(0, groups - int(done.get("groups", 0)) - int(done.get("groups_aborted", 0)))
    return Budget(deadline, groups)
