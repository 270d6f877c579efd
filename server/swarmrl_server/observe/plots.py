"""`swarmrl plot RUN_DIR [RUN_DIR ...]`: PNGs of training runs, several overlaid.

Reads the trainer's ``metrics.jsonl`` (one JSON object per step and model, names as
`observe/metrics.py` writes them) and writes, into ``--out``:

- ``reward-<task>.png`` per task (and ``reward-all.png``): mean reward over steps;
- ``training.png``: loss, KL (verl's ``actor/ppo_kl``, or ``actor/kl_ref``), entropy,
  clip fraction;
- ``merge.png``: tokens as calls / tokens as timelines (and / packed, when packing);
- ``throughput.png``: trained tokens/s and episodes/s between steps, and step time;
- ``validation.png``, when a run dir holds the ``card.json`` of ``swarmrl train``: val
  success rate (with its Wilson 95% interval) and mean reward at each pinned evaluation,
  over minutes of training. For each such run it also prints the time-average of both
  (`ValCurve`), the figure that compares how fast runs learn.

Every run (and model, when a run trains several) is one line; the raw values are
drawn faint under a moving average.
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRAINING = (("loss/total", "loss"), (("actor/ppo_kl", "actor/kl_ref"), "KL"),
            ("actor/entropy", "entropy"), ("actor/pg_clipfrac", "clip fraction"))


@dataclass
class Series:
    """One run's steps of one model."""

    label: str
    rows: list[dict[str, float]] = field(default_factory=list)

    def values(self, key: str | Sequence[str]) -> tuple[list[float], list[float]]:
        keys = (key,) if isinstance(key, str) else tuple(key)
        xs, ys = [], []
        for row in self.rows:
            v = next((row[k] for k in keys if row.get(k) is not None), None)
            if v is not None and math.isfinite(v):
                xs.append(row["step"])
                ys.append(v)
        return xs, ys

    def rates(self, key: str) -> tuple[list[float], list[float]]:
        """`key` summed per step divided by the wall time since the previous step."""
        xs, ys = [], []
        for prev, row in zip(self.rows, self.rows[1:]):
            dt = row.get("time", 0.0) - prev.get("time", 0.0)
            if dt > 0 and row.get(key) is not None:
                xs.append(row["step"])
                ys.append(row[key] / dt)
        return xs, ys

    def tasks(self) -> list[str]:
        found: set[str] = set()
        for row in self.rows:
            for k in row:
                if k.startswith("reward/") and k.endswith("/mean") and k != "reward/mean":
                    found.add(k[len("reward/"):-len("/mean")])
        return sorted(found)


@dataclass
class ValCurve:
    """A run's val evaluations (``card.json``'s ``evals`` of split val), over training time.

    The curve joins the evaluations with straight lines; its time-average (the area under
    it, by the trapezoid rule, over the minutes from the first evaluation to the last) is
    "val success per wall-clock minute" as one number per run: it rewards a run that
    reaches a score early, and equals the score for a run that starts and stays there.
    """

    label: str
    minutes: list[float]
    success: list[float]
    success_ci: list[tuple[float, float]]
    reward: list[float]

    @classmethod
    def from_card(cls, label: str, card: dict[str, Any]) -> ValCurve | None:
        evals = sorted((e for e in card.get("evals", []) if e.get("split") == "val"),
                       key=lambda e: e.get("train_seconds", 0.0))
        if not evals:
            return None
        figures = [e["figures"] for e in evals]
        return cls(label, [e.get("train_seconds", 0.0) / 60 for e in evals],
                   [f.get("success_rate", 0.0) for f in figures],
                   [(f["success_ci95"][0], f["success_ci95"][1]) if "success_ci95" in f
                    else (0.0, 0.0) for f in figures],
                   [f.get("mean_reward", 0.0) for f in figures])

    def time_average(self, ys: Sequence[float]) -> float:
        """The curve through (minutes, ys) averaged over its minutes (trapezoid rule)."""
        span = self.minutes[-1] - self.minutes[0]
        if span <= 0:
            return ys[-1]
        area = sum((y0 + y1) / 2 * (t1 - t0) for y0, y1, t0, t1
                   in zip(ys, ys[1:], self.minutes, self.minutes[1:]))
        return area / span


def load_val_curves(run_dirs: Sequence[Path]) -> list[ValCurve]:
    """The val curve of each run dir holding a ``card.json`` with val evaluations,
    labelled as `run_labels` labels the run."""
    curves = []
    for run_dir, label in zip(run_dirs, run_labels(run_dirs)):
        path = run_dir / "card.json"
        if path.is_file():
            curve = ValCurve.from_card(label, json.loads(path.read_text()))
            if curve is not None:
                curves.append(curve)
    return curves


def find_metrics(run_dir: Path) -> Path:
    """The run's metrics.jsonl: in the dir, its data/ dir (the demo), or below."""
    for candidate in (run_dir, run_dir / "data"):
        if (candidate / "metrics.jsonl").is_file():
            return candidate / "metrics.jsonl"
    found = sorted(run_dir.rglob("metrics.jsonl"))
    if not found:
        raise FileNotFoundError(f"no metrics.jsonl in {run_dir}")
    return found[0]


def run_labels(run_dirs: Sequence[Path]) -> list[str]:
    """Each run's directory name (its full path where two names are the same)."""
    names = [d.resolve().name or str(d) for d in run_dirs]
    if len(set(names)) < len(names):
        names = [str(d) for d in run_dirs]
    return names


def load_runs(run_dirs: Sequence[Path]) -> list[Series]:
    """One series per (run, model); a run's label is `run_labels`'."""
    out: list[Series] = []
    for run_dir, name in zip(run_dirs, run_labels(run_dirs)):
        by_model: dict[str, Series] = {}
        for line in find_metrics(run_dir).read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            model = str(row.get("model", ""))
            by_model.setdefault(model, Series(name)).rows.append(row)
        for model, series in by_model.items():
            if len(by_model) > 1:
                series.label = f"{name} ({model})"
            series.rows.sort(key=lambda r: r["step"])
            out.append(series)
    return out


def smooth(ys: Sequence[float], window: int) -> list[float]:
    """Trailing moving average (window 1 = the values)."""
    out, total = [], 0.0
    for i, y in enumerate(ys):
        total += y
        if i >= window:
            total -= ys[i - window]
        out.append(total / min(i + 1, window))
    return out


def _slug(task: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", task).strip("_") or "task"


class _Figure:
    def __init__(self, title: str, panels: int, window: int) -> None:
        import matplotlib.pyplot as plt

        cols = 2 if panels > 1 else 1
        rows = math.ceil(panels / cols)
        self.fig, axes = plt.subplots(rows, cols, figsize=(6.4 * cols, 3.6 * rows),
                                      squeeze=False)
        self.axes = [a for row in axes for a in row]
        for extra in self.axes[panels:]:
            extra.set_visible(False)
        if panels > 1:  # one panel has its own title
            self.fig.suptitle(title)
        self.window = window
        self._colors: dict[str, str] = {}

    def line(self, panel: int, label: str, xs: list[float], ys: list[float]) -> str:
        """Draws one run's line; returns its color, the same for a label in every panel."""
        color = self._colors.setdefault(label, f"C{len(self._colors) % 10}")
        if not xs:
            return color
        ax = self.axes[panel]
        if self.window > 1:
            ax.plot(xs, ys, color=color, alpha=0.25, linewidth=0.8)
        ax.plot(xs, smooth(ys, self.window), color=color, label=label, linewidth=1.6,
                marker="o" if len(xs) < 30 else None, markersize=3)
        return color

    def save(self, path: Path, titles: Sequence[str], ylabels: Sequence[str],
             xlabel: str = "step") -> Path:
        for ax, title, ylabel in zip(self.axes, titles, ylabels):
            ax.set_title(title)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize="small")
        self.fig.tight_layout()
        self.fig.savefig(path, dpi=110)
        import matplotlib.pyplot as plt

        plt.close(self.fig)
        return path


def plot_runs(run_dirs: Sequence[Path], out_dir: Path, *, window: int = 5) -> list[Path]:
    """Writes the PNGs; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    runs = load_runs(run_dirs)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    tasks = sorted({t for s in runs for t in s.tasks()})
    for task in ["all", *tasks]:
        key = "reward/mean" if task == "all" else f"reward/{task}/mean"
        fig = _Figure(f"reward: {task}", 1, window)
        for s in runs:
            fig.line(0, s.label, *s.values(key))
        written.append(fig.save(out_dir / f"reward-{_slug(task)}.png",
                                [f"mean reward ({task})"], ["reward"]))
    fig = _Figure("training", len(TRAINING), window)
    for i, (keys, _) in enumerate(TRAINING):
        for s in runs:
            fig.line(i, s.label, *s.values(keys))
    written.append(fig.save(out_dir / "training.png", [t for _, t in TRAINING],
                            [t for _, t in TRAINING]))
    fig = _Figure("timeline merging and packing", 2, window)
    for s in runs:
        fig.line(0, s.label, *s.values(("merge/compression", "merge/token_ratio")))
        fig.line(1, s.label, *s.values("merge/pack_token_ratio"))
    written.append(fig.save(out_dir / "merge.png",
                            ["merge ratio (tokens as calls / as timelines)",
                             "packing ratio (timeline tokens / packed tokens)"],
                            ["ratio", "ratio"]))
    fig = _Figure("throughput", 3, window)
    for s in runs:
        fig.line(0, s.label, *s.rates("actor/tokens_trained"))
        fig.line(1, s.label, *s.rates("reward/episodes"))
        fig.line(2, s.label, *s.values("time/step_s"))
    written.append(fig.save(out_dir / "throughput.png",
                            ["trained tokens / s", "episodes trained / s", "step time"],
                            ["tokens/s", "episodes/s", "seconds"]))
    curves = load_val_curves(run_dirs)
    if curves:
        fig = _Figure("validation (pinned versions)", 2, 1)
        for c in curves:
            color = fig.line(0, c.label, c.minutes, c.success)
            fig.axes[0].fill_between(c.minutes, [lo for lo, _ in c.success_ci],
                                     [hi for _, hi in c.success_ci], color=color, alpha=0.12)
            fig.line(1, c.label, c.minutes, c.reward)
        written.append(fig.save(out_dir / "validation.png",
                                ["val success rate (Wilson 95%)", "val mean reward"],
                                ["success rate", "reward"], xlabel="training minutes"))
    return written


def val_summary(run_dirs: Sequence[Path]) -> list[str]:
    """One line per run with val evaluations: its time-averaged val success and reward."""
    return [f"{c.label}: val over {c.minutes[-1]:.1f} training minutes, time-averaged: "
            f"success {c.time_average(c.success):.3f}, reward {c.time_average(c.reward):.3f}; "
            f"last: success {c.success[-1]:.3f}, reward {c.reward[-1]:.3f}"
            for c in load_val_curves(run_dirs)]


def build_parser(prog: str = "swarmrl plot") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog, description="Plot training runs from their metrics.jsonl (several overlaid).",
        epilog="example:\n  swarmrl plot runs/demo runs/demo-s1 --out runs/compare",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR",
                   help="a data dir (or a dir above one) holding metrics.jsonl")
    p.add_argument("--out", type=Path, help="where the PNGs go (default: RUN_DIR/plots of the first)")
    p.add_argument("--smooth", type=int, default=5, metavar="STEPS",
                   help="moving-average window (default: %(default)s; 1 = raw)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = args.out or args.run_dirs[0] / "plots"
    try:
        paths = plot_runs(args.run_dirs, out, window=max(1, args.smooth))
    except FileNotFoundError as err:
        print(f"swarmrl plot: {err}")
        return 1
    for path in paths:
        print(path)
    for line in val_summary(args.run_dirs):
        print(line)
    return 0
