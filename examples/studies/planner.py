"""An example study planner: try learning rates around the best run's.

``planner.function: examples.studies.planner:around_the_best`` in a study file. A
planner gets the runs so far (overrides, seed, state, final and best metric) and the
study as plain data, and returns proposals; `swarmrl study run` validates each one
against the study's schema before it runs, and logs it either way.
"""

from __future__ import annotations

from typing import Any


def around_the_best(runs: list[dict[str, Any]], study: dict[str, Any]) -> list[dict[str, Any]]:
    sign = 1.0 if study["metric"]["direction"] == "max" else -1.0
    scored = [r for r in runs if r["final_metric"] is not None]
    if not scored:
        return []
    best = max(scored, key=lambda r: sign * r["final_metric"])
    lr = float(best["overrides"].get("train.lr", study["server"]["train_options"].get("lr", 1e-5)))
    why = f"around {best['run_id']} ({best['final_metric']:.3f})"
    return [{"overrides": {**best["overrides"], "train.lr": lr * factor}, "why": why}
            for factor in (0.5, 2.0)]
