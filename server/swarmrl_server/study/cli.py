"""``swarmrl study run | status | report STUDY.yaml``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from swarmrl_server.study.schema import Study, StudyError, workdir_for
from swarmrl_server.study.state import RunRecord, StudyRecord, StudyState
from swarmrl_server.study.validate import load_study

if TYPE_CHECKING:
    from rich.table import Table

EPILOG = """\
examples:
  swarmrl study run examples/studies/fruit_quiz_lr.yaml          # runs, heals, reports
  swarmrl study run STUDY.yaml --ray-address http://head:8265    # each run a Ray job
  swarmrl study status STUDY.yaml                                # the runs' table
  swarmrl study report STUDY.yaml                                # Markdown + HTML + PNG

Killed and run again, `study run` resumes: finished runs are never run again, and
unfinished ones continue from their server's checkpoint.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="swarmrl study", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a study: many training runs, supervised and healed, then compared.")
    sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    run = sub.add_parser("run", help="run the study's experiments (resumes a stopped study)")
    run.add_argument("study", type=Path, help="the study file (YAML)")
    run.add_argument("--ray-address", metavar="ADDR",
                     help="run each experiment as a Ray job on this cluster (its dashboard "
                          "address, e.g. http://127.0.0.1:8265)")
    run.add_argument("--ray-job-cpus", type=float, metavar="N",
                     help="CPUs each Ray job reserves (entrypoint_num_cpus)")
    run.add_argument("--no-report", action="store_true", help="skip the report at the end")
    for name, text in (("status", "show every run's state, step, metric and restarts"),
                       ("report", "write the Markdown and HTML report with plots")):
        sub.add_parser(name, help=text).add_argument("study", type=Path,
                                                    help="the study file (YAML)")
    return p


def runs_table(study: Study, record: StudyRecord, runs: list[RunRecord]) -> Table:
    from rich.table import Table

    table = Table(title=f"study {study.name}", title_justify="left")
    for column in ("run", "config", "state", "step", study.metric.name, "best", "episodes",
                   "wall", "restarts", "why"):
        table.add_column(column)
    colors = {"running": "cyan", "done": "green", "stopped": "yellow", "failed": "red"}
    for r in runs:
        restarts = ", ".join(x.what for x in r.restarts) or "-"
        table.add_row(
            r.run_id, r.spec().label(), f"[{colors.get(r.state, 'white')}]{r.state}[/]",
            str(r.step), "-" if r.metric is None else f"{r.metric:.4g}",
            "-" if r.best is None else f"{r.best:.4g} @ {r.best_step}", str(r.episodes),
            f"{r.wall_s:.0f}s", f"{len(r.restarts)} ({restarts})", r.reason)
    return table


def _load(path: Path, *, deep: bool = False) -> tuple[Study, StudyState]:
    study = load_study(path, deep=deep)
    return study, StudyState(workdir_for(study, path))


def run(args: argparse.Namespace) -> int:
    from swarmrl_server.heap import long_lived

    with long_lived():  # the supervisor's imports live as long as it does
        from rich.console import Console
        from rich.live import Live

        from swarmrl_server.study.planner import make_planner
        from swarmrl_server.study.report import write_report
        from swarmrl_server.study.runner import StudyRunner, local_backend

    study, state = _load(args.study, deep=True)
    stopping = threading.Event()

    def stop(signum: int, frame: object) -> None:
        stopping.set()  # runs stop their processes (a server checkpoints) and stay resumable

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    if args.ray_address:
        from swarmrl_server.study.ray_jobs import ray_backend

        backend = ray_backend(study, args.study, state, args.ray_address,
                              entrypoint_num_cpus=args.ray_job_cpus)
    else:
        backend = local_backend(study, state, Path.cwd())
    planner = make_planner(study) if study.planner is not None else None
    runner = StudyRunner(study, state, backend, stopping=stopping, planner=planner)
    record = runner.prepare()
    console = Console(stderr=True)
    if not console.is_terminal:  # a log file: wide enough for the table
        console = Console(stderr=True, width=200)
    print(f"study {study.name}: workdir {state.workdir}", file=sys.stderr, flush=True)
    worker = threading.Thread(target=runner.run, name="study", daemon=True)
    worker.start()
    with Live(runs_table(study, record, state.runs(record)), console=console,
              refresh_per_second=1, transient=not console.is_terminal) as live:
        while worker.is_alive():
            worker.join(1.0)
            record = state.load_study(study.name)
            live.update(runs_table(study, record, state.runs(record)))
    record = state.load_study(study.name)
    runs = state.runs(record)
    console.print(runs_table(study, record, runs))
    if stopping.is_set():
        print("study stopped; run the same command again to resume", file=sys.stderr)
        return 130
    if not args.no_report:
        print(f"report: {write_report(study, state)}", file=sys.stderr)
    return 0 if all(r.finished for r in runs) else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.action == "run":
            return run(args)
        study, state = _load(args.study)
        if args.action == "status":
            from rich.console import Console

            record = state.load_study(study.name)
            Console(width=None if sys.stdout.isatty() else 200).print(runs_table(study, record, state.runs(record)))
            return 0
        from swarmrl_server.study.report import write_report

        started = time.monotonic()
        path = write_report(study, state)
        print(f"{path} ({path.with_suffix('.html').name} beside it), "
              f"{time.monotonic() - started:.1f} s")
        return 0
    except StudyError as err:
        print(f"swarmrl study: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
