"""The defaults study's ranking rule (results/studies/defaults-plan.md), as code fixed with
the plan, before any run: reads the runs of the study files and prints each cell and the
ranking.

    python -m examples.studies.defaults_rank                      # the four stage-1 files
    python -m examples.studies.defaults_rank examples/studies/defaults_textworld.yaml ...

A run's figure is its time-averaged val success (`swarmrl plot`'s: the pinned val
evaluations joined over training minutes, averaged by the trapezoid rule) and reward; a
cell (recipe x environment) is the mean over its seeds; Δ is the cell's success minus
the environment's val base rate (its runs' ``before`` evaluation, the same model for
every recipe). A recipe's score is its mean Δ over the environments it ran on; ties
(equal to three decimals) go to the higher mean time-averaged val reward. Recipes are
named by their place in the study file's variation list: R0, R1, ...
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

WIN_MARGIN = 0.02
"""A winner may be below R0's cell by at most this on any environment."""
PRUNE_MARGIN = 0.05
"""Stage 1: a recipe below the best cell by more than this on every early environment is
not run on the later ones."""
EARLY = ("higher-lower", "reasoning-gym")
STUDIES = [Path("examples/studies") / f"defaults_{name}.yaml" for name in
           ("higher_lower", "reasoning_gym", "forced_tools", "textworld")]


@dataclass(frozen=True)
class RunFigure:
    """One run's val curve, reduced: time-averaged success and reward, and its start."""

    success: float
    reward: float
    before: float


@dataclass(frozen=True)
class Cell:
    recipe: str
    env: str
    runs: int
    success: float
    reward: float
    delta: float


def cells(figures: dict[tuple[str, str], list[RunFigure]]) -> list[Cell]:
    """Each (recipe, environment)'s mean over its runs."""
    return [Cell(recipe, env, len(runs), statistics.fmean(r.success for r in runs),
                 statistics.fmean(r.reward for r in runs),
                 statistics.fmean(r.success - r.before for r in runs))
            for (recipe, env), runs in sorted(figures.items()) if runs]


def ranking(table: list[Cell]) -> list[tuple[str, float, float]]:
    """(recipe, score, tie-break reward), best first."""
    by_recipe: dict[str, list[Cell]] = {}
    for c in table:
        by_recipe.setdefault(c.recipe, []).append(c)
    scored = [(recipe, round(statistics.fmean(c.delta for c in cs), 3),
               statistics.fmean(c.reward for c in cs)) for recipe, cs in by_recipe.items()]
    return sorted(scored, key=lambda s: (-s[1], -s[2], s[0]))


def beats_reference(table: list[Cell], recipe: str, reference: str = "R0") -> bool:
    """The plan's win: a higher score than `reference`, and no environment where its cell
    is below the reference's by more than WIN_MARGIN."""
    scores = {r: s for r, s, _ in ranking(table)}
    if recipe not in scores or reference not in scores or scores[recipe] <= scores[reference]:
        return False
    mine = {c.env: c.success for c in table if c.recipe == recipe}
    ref = {c.env: c.success for c in table if c.recipe == reference}
    return all(mine[e] >= ref[e] - WIN_MARGIN for e in ref if e in mine)


def pruned(table: list[Cell]) -> list[str]:
    """Recipes below the best cell by more than PRUNE_MARGIN on every early environment
    (R0, the reference, is never pruned)."""
    best = {e: max(c.success for c in table if c.env == e) for e in EARLY
            if any(c.env == e for c in table)}
    out = []
    for recipe in sorted({c.recipe for c in table} - {"R0"}):
        mine = {c.env: c.success for c in table if c.recipe == recipe}
        if best and all(e in mine and mine[e] < best[e] - PRUNE_MARGIN for e in best):
            out.append(recipe)
    return out


def read_study(path: Path) -> dict[tuple[str, str], list[RunFigure]]:
    """The run figures of one study file's finished runs, by (recipe, environment)."""
    from swarmrl_server.observe.plots import ValCurve
    from swarmrl_server.study.schema import workdir_for
    from swarmrl_server.study.state import RunRecord
    from swarmrl_server.study.validate import load_study

    study = load_study(path, deep=False)
    recipes = [dict(v) for v in study.variations.items]
    card_file = study.results.file if study.results else "run/card.json"
    out: dict[tuple[str, str], list[RunFigure]] = {}
    for run_json in sorted((workdir_for(study, path) / "runs").glob("*/run.json")):
        run = RunRecord.model_validate_json(run_json.read_text())
        card_path = run_json.parent / card_file
        if run.overrides not in recipes or not card_path.is_file():
            continue
        card = json.loads(card_path.read_text())
        curve = ValCurve.from_card(run.run_id, card)
        if curve is None or not card.get("finished"):
            continue
        key = (f"R{recipes.index(run.overrides)}", card["env"]["label"])
        out.setdefault(key, []).append(RunFigure(curve.time_average(curve.success),
                                                 curve.time_average(curve.reward),
                                                 curve.success[0]))
    return out


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("studies", nargs="*", type=Path, default=STUDIES)
    args = p.parse_args(argv)
    figures: dict[tuple[str, str], list[RunFigure]] = {}
    for path in args.studies:
        figures.update(read_study(path))
    table = cells(figures)
    print("| recipe | environment | runs | time-averaged val success | reward | Δ |")
    print("| --- | --- | --- | --- | --- | --- |")
    for c in table:
        print(f"| {c.recipe} | {c.env} | {c.runs} | {c.success:.3f} | {c.reward:.3f} | "
              f"{c.delta:+.3f} |")
    print()
    out = pruned(table)
    for place, (recipe, score, reward) in enumerate(ranking(table), 1):
        note = (" (pruned: cannot win)" if recipe in out else
                " (beats R0 by the plan's rule)" if beats_reference(table, recipe) else "")
        print(f"{place}. {recipe}: mean Δ {score:+.3f}, reward {reward:.3f}{note}")
    print(f"pruned after {' and '.join(EARLY)}: {', '.join(out) or 'none'}")


if __name__ == "__main__":
    main()
