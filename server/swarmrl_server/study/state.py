"""What survives a killed ``swarmrl study run``: one JSON file per run, one for the study.

Layout under the study's workdir::

    study.json            the runs of every stage, the planner's proposals (accepted
                          or refused, with reasons)
    runs/<run_id>/
        run.json          the run's state, progress, restarts and live process ids
        data/             the server's data dir (store, checkpoints, metrics.jsonl)
        logs/             the server's and clients' output, appended across restarts

Every write goes to a temporary sibling that is fsynced and renamed over the file,
so a crash leaves either the old or the new version, never half of one. Each run's
file has one writer at a time (its supervisor: a thread of `study run`, or a Ray
job); the study's file is written only by `study run` itself.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from swarmrl_server.study.schema import RunSpec, Value

RunState = Literal["pending", "running", "done", "stopped", "failed"]
FINISHED: tuple[RunState, ...] = ("done", "stopped", "failed")
"""A run in one of these states is never started again."""


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Restart(BaseModel):
    at: float
    what: str
    """"server" or a client's name (``agent#0``)."""
    reason: str
    step: int = 0
    """The run's last metrics step when it happened."""


class LiveProcess(BaseModel):
    pid: int
    create_time: float
    """psutil's create time: a pid reused by another process is not ours."""


class RunRecord(BaseModel):
    run_id: str
    stage: int
    overrides: dict[str, Value] = {}
    seed: int = 0
    origin: str = "study"
    state: RunState = "pending"
    reason: str = ""
    """Why it finished (a budget, a stop rule, the clients finishing, too many restarts)."""
    grpc_port: int = 0
    http_port: int = 0
    step: int = 0
    metric: float | None = None
    """The chosen metric's final value (`watch.progress`)."""
    best: float | None = None
    best_step: int = 0
    episodes: int = 0
    wall_s: float = 0.0
    """Seconds supervised, summed over `study run` invocations."""
    restarts: list[Restart] = []
    processes: dict[str, LiveProcess] = {}
    job_id: str = ""
    """The Ray job's submission id (with --ray-address)."""
    updated_at: float = 0.0

    @classmethod
    def new(cls, spec: RunSpec) -> RunRecord:
        return cls(run_id=spec.run_id, stage=spec.stage, overrides=spec.overrides,
                   seed=spec.seed, origin=spec.origin)

    def spec(self) -> RunSpec:
        return RunSpec(self.run_id, self.stage, dict(self.overrides), self.seed, self.origin)

    def count(self, what: str) -> int:
        """Restarts of the server ("server") or of any client ("client")."""
        return sum(1 for r in self.restarts if (r.what == "server") == (what == "server"))

    @property
    def finished(self) -> bool:
        return self.state in FINISHED


class Proposal(BaseModel):
    stage: int
    """The stage it was proposed for."""
    overrides: dict[str, Value] | None = None
    raw: str = ""
    """What the planner gave, when it could not be read as overrides."""
    why: str = ""
    """The planner's own reason."""
    accepted: bool
    reason: str = ""
    """Why it was refused, or the runs it became."""


class StudyRecord(BaseModel):
    name: str
    stages: list[list[str]] = []
    """Run ids of each stage, in order."""
    proposals: list[Proposal] = []
    planner_errors: list[str] = []


class StudyState:
    """The workdir's files (see the module docstring)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.runs_dir = workdir / "runs"

    def run_dir(self, run_id: str) -> Path:
        return self.runs_dir / run_id

    def load_study(self, name: str) -> StudyRecord:
        path = self.workdir / "study.json"
        if path.is_file():
            return StudyRecord.model_validate_json(path.read_text())
        return StudyRecord(name=name)

    def save_study(self, record: StudyRecord) -> None:
        write_atomic(self.workdir / "study.json", record.model_dump_json(indent=1))

    def load_run(self, run_id: str) -> RunRecord | None:
        path = self.run_dir(run_id) / "run.json"
        if not path.is_file():
            return None
        return RunRecord.model_validate_json(path.read_text())

    def save_run(self, record: RunRecord) -> None:
        record.updated_at = time.time()
        write_atomic(self.run_dir(record.run_id) / "run.json", record.model_dump_json(indent=1))

    def runs(self, study: StudyRecord) -> list[RunRecord]:
        """Every run of every stage that has a record, in stage order."""
        found = (self.load_run(r) for stage in study.stages for r in stage)
        return [r for r in found if r is not None]
