"""The study's report: Markdown and HTML, with the runs' curves overlaid (PNG).

Written to ``<workdir>/report/``: ``report.md``, ``report.html``, ``metric.png``
(the study's metric, every run one line) and ``plots/`` (`swarmrl plot`'s figures
of all runs overlaid). Sections: the ranking by the metric's final value with its
spread over seeds, the runs (config diff against the base, final and best metric
with their steps, wall time, restarts), every restart and why, and the planner's
proposals, accepted or refused with the reason.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from swarmrl_server.study import watch
from swarmrl_server.study.schema import Study
from swarmrl_server.study.state import Proposal, RunRecord, StudyRecord, StudyState


@dataclass(frozen=True)
class Ranked:
    """One variation's runs (its seeds) and their final metrics."""

    variation: str
    run_ids: list[str]
    finals: list[float]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.finals) if self.finals else math.nan

    @property
    def std(self) -> float:
        return statistics.stdev(self.finals) if len(self.finals) > 1 else 0.0


def rank(study: Study, runs: list[RunRecord]) -> list[Ranked]:
    """Variations ordered by their runs' mean final metric (best first); runs that
    reported no metric rank last."""
    by_key: dict[str, tuple[list[str], list[float]]] = {}
    for r in runs:
        ids, finals = by_key.setdefault(r.spec().variation_key(), ([], []))
        ids.append(r.run_id)
        if r.metric is not None:
            finals.append(r.metric)
    ranked = [Ranked(k, ids, finals) for k, (ids, finals) in by_key.items()]
    sign = -1.0 if study.metric.direction == "max" else 1.0
    return sorted(ranked, key=lambda x: (not x.finals, sign * x.mean if x.finals else 0.0))


def _num(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.4g}"


def _row(r: RunRecord) -> dict[str, str]:
    reasons = "; ".join(f"{x.what}: {x.reason}" for x in r.restarts)
    return {"run": r.run_id, "stage": str(r.stage), "diff": r.spec().label(),
            "state": r.state, "why": r.reason, "final": f"{_num(r.metric)} @ {r.step}",
            "best": f"{_num(r.best)} @ {r.best_step}", "episodes": str(r.episodes),
            "wall": f"{r.wall_s:.0f} s", "restarts": f"{len(r.restarts)}"
            + (f" ({reasons})" if reasons else "")}


def _results_file(study: Study, run_dir: Path) -> Any:
    if study.results is None:
        return {}
    try:
        return json.loads((run_dir / study.results.file).read_text())
    except (OSError, ValueError):
        return {}


def _at(data: Any, key: str) -> Any:
    """The value at a dotted key (list items by index), or None."""
    for part in key.split("."):
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.lstrip("-").isdigit() and -len(data) <= int(
                part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


def results(study: Study, run_dir: Path) -> list[str]:
    """The run's `Study.results` columns ("-" for a value its file does not hold yet)."""
    if study.results is None:
        return []
    data = _results_file(study, run_dir)
    out = []
    for key in study.results.columns.values():
        value = _at(data, key)
        out.append(_num(value) if isinstance(value, (int, float)) else
                   "-" if value is None else str(value))
    return out


def ranked_value(study: Study, run_dir: Path) -> float | None:
    """A run's `Metric.rank_by` figure from its results file (None until written)."""
    assert study.metric.rank_by is not None
    value = _at(_results_file(study, run_dir), study.metric.rank_by)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _runs_table(study: Study, state: StudyState,
                runs: list[RunRecord]) -> tuple[list[str], list[list[str]]]:
    """The Runs table: the columns every study has, then its `results` columns."""
    extra = list(study.results.columns) if study.results else []
    return ([t for _, t in COLUMNS] + extra,
            [[_row(r)[k] for k, _ in COLUMNS] + results(study, state.run_dir(r.run_id))
             for r in runs])


COLUMNS = (("run", "run"), ("stage", "stage"), ("diff", "config vs base"), ("state", "state"),
           ("why", "finished because"), ("final", "final @ step"), ("best", "best @ step"),
           ("episodes", "episodes"), ("wall", "wall"), ("restarts", "restarts (why)"))


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]


def plot(study: Study, state: StudyState, runs: list[RunRecord], out: Path) -> list[Path]:
    """metric.png (the study's metric per run) and `swarmrl plot`'s figures, overlaid."""
    import matplotlib

    matplotlib.use("Agg")
    from swarmrl_server.observe.plots import _Figure, load_runs, plot_runs

    # A run's directory is named by its id: the curves' labels are the run ids.
    dirs = [state.run_dir(r.run_id) for r in runs
            if (state.run_dir(r.run_id) / "data" / "metrics.jsonl").is_file()]
    if not dirs:
        return []
    out.mkdir(parents=True, exist_ok=True)
    fig = _Figure(study.metric.name, 1, window=1)
    for series in load_runs(dirs):
        fig.line(0, series.label, *series.values(study.metric.name))
    written = [fig.save(out / "metric.png", [f"{study.metric.name} per run"],
                        [study.metric.name])]
    return written + plot_runs(dirs, out / "plots", window=1)


def markdown(study: Study, state: StudyState, record: StudyRecord, runs: list[RunRecord],
             images: list[Path], out: Path) -> str:
    ranked = rank(study, runs)
    ranked_by = (f"ranked by `{study.metric.rank_by}` of each run's results file, "
                 if study.metric.rank_by else "")
    lines = [f"# Study {study.name}", "",
             f"Metric: `{study.metric.name}` ({study.metric.direction}imise; final = mean of "
             f"the last {study.metric.final_window} step(s)); {ranked_by}"
             f"{len(runs)} runs in {len(record.stages)} stage(s); "
             f"{sum(r.finished for r in runs)} finished.", "", "## Ranking", ""]
    lines += _md_table(["rank", "variation", "runs", "final (mean ± std over seeds)"],
                       [[str(i + 1), x.variation, ", ".join(x.run_ids),
                         f"{_num(x.mean)} ± {_num(x.std)} (n={len(x.finals)})"]
                        for i, x in enumerate(ranked)])
    lines += ["", "## Runs", ""]
    lines += _md_table(*_runs_table(study, state, runs))
    restarts = [(r.run_id, x) for r in runs for x in r.restarts]
    lines += ["", "## Restarts", ""]
    lines += _md_table(["run", "what", "at step", "why"],
                       [[rid, x.what, str(x.step), x.reason] for rid, x in restarts]
                       ) if restarts else ["None."]
    lines += ["", "## Planner proposals", ""]
    lines += _md_table(["stage", "proposal", "accepted", "reason", "planner's why"],
                       [_proposal_row(p) for p in record.proposals]
                       ) if record.proposals else ["None."]
    lines += [f"- planner error: {e}" for e in record.planner_errors]
    if images:
        lines += ["", "## Curves", ""]
        lines += [f"![{p.stem}]({p.relative_to(out).as_posix()})" for p in images]
    return "\n".join(lines) + "\n"


def _proposal_row(p: Proposal) -> list[str]:
    shown = " ".join(f"{k}={v}" for k, v in p.overrides.items()) if p.overrides else p.raw
    return [str(p.stage), shown, "yes" if p.accepted else "no", p.reason, p.why]


HTML: jinja2.Template = jinja2.Template("""<!doctype html>
<html><head><meta charset="utf-8"><title>Study {{ name }}</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:left}
th{background:#f3f3f3}img{max-width:900px;display:block;margin:1em 0}</style></head><body>
<h1>Study {{ name }}</h1><p>{{ summary }}</p>
{% for title, header, rows in tables %}<h2>{{ title }}</h2>
{% if rows %}<table><tr>{% for h in header %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for c in row %}<td>{{ c }}</td>{% endfor %}</tr>{% endfor %}
</table>{% else %}<p>None.</p>{% endif %}{% endfor %}
{% for e in errors %}<p>planner error: {{ e }}</p>{% endfor %}
{% if images %}<h2>Curves</h2>{% for src in images %}<img src="{{ src }}">{% endfor %}{% endif %}
</body></html>
""", autoescape=True)


def html(study: Study, state: StudyState, record: StudyRecord, runs: list[RunRecord],
         images: list[Path], out: Path) -> str:
    ranked = rank(study, runs)
    tables = [
        ("Ranking", ["rank", "variation", "runs", "final (mean ± std over seeds)"],
         [[str(i + 1), x.variation, ", ".join(x.run_ids),
           f"{_num(x.mean)} ± {_num(x.std)} (n={len(x.finals)})"] for i, x in enumerate(ranked)]),
        ("Runs", *_runs_table(study, state, runs)),
        ("Restarts", ["run", "what", "at step", "why"],
         [[r.run_id, x.what, str(x.step), x.reason] for r in runs for x in r.restarts]),
        ("Planner proposals", ["stage", "proposal", "accepted", "reason", "planner's why"],
         [_proposal_row(p) for p in record.proposals]),
    ]
    summary = (f"Metric {study.metric.name} ({study.metric.direction}imise; final = mean of the "
               f"last {study.metric.final_window} step(s)); {len(runs)} runs in "
               f"{len(record.stages)} stage(s).")
    return HTML.render(name=study.name, summary=summary, tables=tables,
                       errors=record.planner_errors,
                       images=[p.relative_to(out).as_posix() for p in images])


def write_report(study: Study, state: StudyState, *, plots: bool = True) -> Path:
    """Writes the report; returns the Markdown file's path."""
    record = state.load_study(study.name)
    runs = state.runs(record)
    for r in runs:  # from the metrics, so a changed metric or final_window applies
        rows = watch.read_rows(state.run_dir(r.run_id) / "data")
        if rows:
            p = watch.progress(rows, study.metric)
            r.step, r.metric, r.best, r.best_step = p.step, p.metric, p.best, p.best_step
        if study.metric.rank_by is not None:  # ranked by a val figure the client wrote
            r.metric = ranked_value(study, state.run_dir(r.run_id))
    out = state.workdir / "report"
    out.mkdir(parents=True, exist_ok=True)
    images = plot(study, state, runs, out) if plots else []
    (out / "report.md").write_text(markdown(study, state, record, runs, images, out))
    (out / "report.html").write_text(html(study, state, record, runs, images, out))
    return out / "report.md"
