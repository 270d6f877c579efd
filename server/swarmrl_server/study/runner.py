"""A study's stages: each stage's runs, `concurrency` at a time, then the planner.

Stage 0 is the study file's variations; after a stage has finished, the planner (if
any, `planner.stages` times) proposes the next one. Which runs make up each stage is
written to ``study.json`` before any of them starts, and each run's record before it
is handed to a backend, so a `study run` killed at any point and started again
finds the same runs, skips the finished ones and resumes the rest.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from swarmrl_server.study.schema import RunSpec, Study, expand
from swarmrl_server.study.state import RunRecord, StudyRecord, StudyState


class Backend(Protocol):
    """Runs one experiment until it finishes, or until `stopping` is set."""

    def __call__(self, spec: RunSpec, stopping: threading.Event) -> RunRecord: ...


def local_backend(study: Study, state: StudyState, cwd: Path) -> Backend:
    """Each run's processes on this machine, supervised by a thread of `study run`."""
    from swarmrl_server.study.supervisor import RunSupervisor

    def run(spec: RunSpec, stopping: threading.Event) -> RunRecord:
        return RunSupervisor(study, state, spec, stopping=stopping, cwd=cwd).run()

    return run


class StudyRunner:
    def __init__(self, study: Study, state: StudyState, backend: Backend, *,
                 stopping: threading.Event | None = None,
                 planner: Callable[[StudyRecord, list[RunRecord], int], list[RunSpec]]
                 | None = None) -> None:
        self.study, self.state, self.backend = study, state, backend
        self.stopping = stopping or threading.Event()
        self.planner = planner

    def prepare(self) -> StudyRecord:
        """The study's record, with stage 0 laid out on first use."""
        record = self.state.load_study(self.study.name)
        if not record.stages:
            self.add_stage(record, expand(self.study))
        return record

    def add_stage(self, record: StudyRecord, specs: list[RunSpec]) -> None:
        for spec in specs:
            if self.state.load_run(spec.run_id) is None:
                self.state.save_run(RunRecord.new(spec))
        record.stages.append([s.run_id for s in specs])
        self.state.save_study(record)

    def run(self) -> StudyRecord:
        record = self.prepare()
        stage = 0
        while not self.stopping.is_set():
            self.run_stage(record.stages[stage])
            if self.stopping.is_set():
                break
            last = stage + 1 == len(record.stages)
            if last and self.planner is not None and self.study.planner is not None \
                    and stage < self.study.planner.stages:
                specs = self.planner(record, self.state.runs(record), stage + 1)
                self.add_stage(record, specs)
            if stage + 1 >= len(record.stages):
                break
            stage += 1
        return record

    def run_stage(self, run_ids: list[str]) -> None:
        pending = []
        for run_id in run_ids:
            rec = self.state.load_run(run_id)
            if rec is not None and not rec.finished:
                pending.append(rec.spec())
        if not pending:
            return
        with ThreadPoolExecutor(max_workers=self.study.concurrency,
                                thread_name_prefix="study-run") as pool:
            futures = [pool.submit(self._one, spec) for spec in pending]
            for future in futures:
                future.result()

    def _one(self, spec: RunSpec) -> RunRecord | None:
        if self.stopping.is_set():
            return None
        return self.backend(spec, self.stopping)
