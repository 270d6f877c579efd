"""``swarmrl compare RUN_A RUN_B``: two evaluations of the same items, paired.

Two intervals that overlap say little about which of two policies is better on the same
items; the paired difference does, each item being its own control (a hard item is hard
for both). So the comparison pairs the runs item by item:

- success (when the environment defines it, one rollout per item): the items only A
  solved and only B solved, and the exact McNemar p-value of that split;
- mean reward, and success with k rollouts per item: the mean per-item difference B - A
  with a paired bootstrap 95% interval (`bootstrap_mean` of the per-item differences:
  items resampled with both runs' values together).

The runs must have evaluated the same items: their cards' split hashes must agree (the
hash is over the items' content, `_flow.splits_record`), and the rollouts must cover the
same item ids. A rollout that failed (its retries spent) is a failure of its run, not a
missing item: as in evaluation's figures it is not solved and its reward counts as 0,
and the failures of each run are reported.

A run folder is what ``swarmrl train`` / ``swarmrl eval`` wrote into ``--out``
(``card.json`` and ``rollouts.jsonl``). ``RUN@VERSION`` keeps only the rollouts played
on that policy version: a train run holds several val evaluations (before, after, every
``--eval-every``), each pinned to one version, and comparing its val without naming one
is refused rather than pooled. Rows of an evaluation a kill cut short, which the card
lists (``cut_evaluations``), are left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from swarmrl.envs._report import read_rollouts
from swarmrl.envs._stats import bootstrap_mean, mcnemar_exact

__all__ = ["Paired", "compare_main", "paired"]


@dataclass(frozen=True)
class Paired:
    """Two evaluations of the same items, compared item by item (module docstring)."""

    items: int
    """Items both runs evaluated (failed rollouts included)."""
    mean_reward_a: float
    """Mean per-item reward (a failed rollout's reward counts as 0, as in evaluation)."""
    mean_reward_b: float
    reward_diff: float
    """Mean per-item reward of B minus A's."""
    reward_diff_ci95: tuple[float, float]
    failed_a: int = 0
    """A's rollouts that failed for good (retries spent): not solved, reward 0."""
    failed_b: int = 0
    success_a: float | None = None
    success_b: float | None = None
    success_diff_ci95: tuple[float, float] | None = None
    only_a: int | None = None
    """Items A solved and B did not (one rollout per item)."""
    only_b: int | None = None
    mcnemar_p: float | None = None

    def __str__(self) -> str:
        lines = [f"{self.items} items paired"]
        if self.failed_a or self.failed_b:
            lines.append(f"failed rollouts (not solved, reward 0): A {self.failed_a}, "
                         f"B {self.failed_b}")
        if self.success_a is not None and self.success_b is not None:
            low, high = self.success_diff_ci95 or (float("nan"), float("nan"))
            line = (f"success: A {self.success_a:.3f}, B {self.success_b:.3f}, "
                    f"B - A {self.success_b - self.success_a:+.3f} "
                    f"(paired 95% CI {low:+.3f} to {high:+.3f})")
            if self.mcnemar_p is not None:
                line += (f"; solved by B only {self.only_b}, by A only {self.only_a}: "
                         f"exact McNemar p = {self.mcnemar_p:.2g}")
            lines.append(line)
        low, high = self.reward_diff_ci95
        lines.append(f"mean reward: A {self.mean_reward_a:.3f}, B {self.mean_reward_b:.3f}, "
                     f"B - A {self.reward_diff:+.3f} (paired 95% CI {low:+.3f} to {high:+.3f})")
        return "\n".join(lines)


def _per_item(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each item's rollouts, each by its last attempt. A failed attempt that was retried
    (as a fresh episode) is recorded too; per item, each row of attempt j + 1 is the retry
    of a failed row of attempt j, which is dropped."""
    by_item: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_item[str(row["item_id"])].append(row)
    out: dict[str, list[dict[str, Any]]] = {}
    for item, item_rows in by_item.items():
        levels: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for row in item_rows:
            levels[int(row.get("attempt") or 0)].append(row)
        final: list[dict[str, Any]] = []
        for attempt, level in sorted(levels.items()):
            retried = len(levels.get(attempt + 1, []))
            failed = [r for r in level if _failed(r)]
            final += [r for r in level if not _failed(r)] + failed[retried:]
        out[item] = final
    return out


def _failed(row: dict[str, Any]) -> bool:
    """A rollout that failed for good has no reward (one a `PolicyError` scored has one)."""
    return row.get("reward") is None


def _reward(row: dict[str, Any]) -> float:
    return 0.0 if _failed(row) else float(row["reward"])


def paired(rows_a: Sequence[dict[str, Any]], rows_b: Sequence[dict[str, Any]]) -> Paired:
    """Compares two evaluations' rollout rows (``rollouts.jsonl`` records) item by item.

    Raises ValueError when the rows do not cover the same items.
    """
    a, b = _per_item(rows_a), _per_item(rows_b)
    if set(a) != set(b):
        raise ValueError(f"the runs evaluated different items ({len(set(a) - set(b))} only "
                         f"in A, {len(set(b) - set(a))} only in B)")
    if not a:
        raise ValueError("no rollout to compare")
    items = sorted(a)

    def mean(values: Sequence[float]) -> float:
        return sum(values) / len(values)

    reward_a = [mean([_reward(r) for r in a[i]]) for i in items]
    reward_b = [mean([_reward(r) for r in b[i]]) for i in items]
    diffs = [y - x for x, y in zip(reward_a, reward_b, strict=True)]
    out: dict[str, Any] = {
        "items": len(items), "mean_reward_a": mean(reward_a), "mean_reward_b": mean(reward_b),
        "reward_diff": mean(diffs), "reward_diff_ci95": bootstrap_mean(diffs),
        "failed_a": sum(_failed(r) for i in items for r in a[i]),
        "failed_b": sum(_failed(r) for i in items for r in b[i])}
    # Over every rollout, as evaluation's figures: a failed one is not solved.
    if all(r.get("success") is not None for i in items for r in a[i] + b[i] if not _failed(r)):
        share_a = [mean([float(bool(r.get("success"))) for r in a[i]]) for i in items]
        share_b = [mean([float(bool(r.get("success"))) for r in b[i]]) for i in items]
        out.update(success_a=mean(share_a), success_b=mean(share_b),
                   success_diff_ci95=bootstrap_mean(
                       [y - x for x, y in zip(share_a, share_b, strict=True)]))
        if all(len(a[i]) == 1 and len(b[i]) == 1 for i in items):
            only_a = sum(x > y for x, y in zip(share_a, share_b, strict=True))
            only_b = sum(y > x for x, y in zip(share_a, share_b, strict=True))
            out.update(only_a=only_a, only_b=only_b, mcnemar_p=mcnemar_exact(only_a, only_b))
    return Paired(**out)


def _versions(rows: Sequence[dict[str, Any]]) -> list[tuple[int, ...]]:
    """Each row's policy versions. A failed rollout has none of its own (it may not have
    reached the model); it belongs to the evaluation that recorded it, whose rows were
    appended around it as they finished: it takes the versions of the nearest finished
    row before it (after it, for the first rows)."""
    own = [tuple(r.get("policy_versions") or ()) for r in rows]
    out, last = [], None
    for versions in own:
        last = versions or last
        out.append(last)
    first = next((v for v in own if v), ())
    return [v if v is not None else first for v in out]


def _load(spec: str, split: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run folder's card and its rows of `split` (``RUN@VERSION``: played on VERSION)."""
    folder, _, version = spec.partition("@")
    path = Path(folder)
    card_path, rows_path = path / "card.json", path / "rollouts.jsonl"
    for needed in (card_path, rows_path):
        if not needed.is_file():
            raise ValueError(f"{spec}: no {needed.name} (a --out folder of swarmrl "
                             "train or eval holds one)")
    card = json.loads(card_path.read_text())
    cut = [(c["after"], c["until"]) for c in card.get("cut_evaluations", [])
           if c.get("split") == split]
    rows = [r for r in read_rollouts(rows_path) if r.get("split") == split
            and not any(a < float(r.get("time", 0.0)) <= b for a, b in cut)]
    evaluations = [e for e in card.get("evals", []) if e.get("split") == split]
    if version:
        wanted = int(version)
        rows = [r for r, v in zip(rows, _versions(rows), strict=True) if v == (wanted,)]
    elif len(evaluations) > 1:
        names = ", ".join(f"{e['name']} (version {e.get('pinned_version')})"
                          for e in evaluations)
        raise ValueError(f"{spec} holds {len(evaluations)} {split} evaluations ({names}): "
                         f"name one as {folder}@VERSION, not their rollouts pooled")
    if not rows:
        raise ValueError(f"{spec}: no {split} rollouts" + (f" on version {version}"
                                                            if version else ""))
    return card, rows


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarmrl compare",
        description="Compare two evaluations of the same items, paired item by item: "
                    "exact McNemar for success (one rollout per item), paired bootstrap "
                    "for mean reward (and for success with k rollouts per item).",
        epilog="example:\n  swarmrl compare runs/base runs/trained          # their test "
               "evaluations\n  swarmrl compare runs/a@0 runs/a@15 --split val  # a run's val, "
               "before and after",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_a", metavar="RUN_A", help="a run folder (card.json, "
                        "rollouts.jsonl); RUN@VERSION keeps the rollouts of that version")
    parser.add_argument("run_b", metavar="RUN_B", help="the other run folder, the same way")
    parser.add_argument("--split", default="test", choices=("val", "test"),
                        help="the split to compare (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser


def compare_main(argv: Sequence[str]) -> int:
    """Entry point of ``swarmrl compare``; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        (card_a, rows_a), (card_b, rows_b) = (_load(s, args.split) for s in (args.run_a,
                                                                             args.run_b))
        hashes = [c.get("splits", {}).get(args.split, {}).get("sha256") for c in (card_a,
                                                                                card_b)]
        if None in hashes or hashes[0] != hashes[1]:
            raise ValueError(f"the runs' {args.split} splits differ (their cards' item "
                             "hashes do not match)")
        result = paired(rows_a, rows_b)
    except ValueError as err:
        print(f"swarmrl compare: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(asdict(result)))
    else:
        print(f"{card_a.get('env', {}).get('spec', '')} {args.split}: A = {args.run_a}, "
              f"B = {args.run_b}")
        print(result)
    return 0
