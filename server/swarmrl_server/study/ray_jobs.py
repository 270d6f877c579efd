"""Runs as Ray jobs (``swarmrl study run --ray-address ADDR``).

Each run is one job submitted through Ray's Job Submission API; Ray places it on a
node. The job's entrypoint is this module: it runs the same `RunSupervisor` as a
local run (server, clients, health, restarts), writing the run's record in the
study's workdir, which must therefore be on storage the cluster's nodes share (on
a single-node cluster, any path). `study run` polls the job's status and reads the
record; stopping `study run` leaves the jobs running, and the next `study run`
re-attaches to them by their submission id (kept in the record) instead of
submitting again. A job that ended without finishing its run (stopped, node lost)
is submitted again and resumes the run from its data dir.

    python -m swarmrl_server.study.ray_jobs STUDY.yaml RUN_ID
"""

from __future__ import annotations

import shlex
import signal
import sys
import threading
import time
from pathlib import Path

from swarmrl_server.study.runner import Backend
from swarmrl_server.study.schema import RunSpec, Study, workdir_for
from swarmrl_server.study.state import RunRecord, StudyState
from swarmrl_server.study.validate import load_study

POLL_S = 1.0
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def ray_backend(study: Study, study_path: Path, state: StudyState, address: str, *,
                entrypoint_num_cpus: float | None = None) -> Backend:
    from ray.job_submission import JobSubmissionClient

    client = JobSubmissionClient(address)

    def status(job_id: str) -> str | None:
        try:
            return str(client.get_job_status(job_id).value)
        except RuntimeError:  # unknown to this cluster (e.g. a new cluster)
            return None

    def run(spec: RunSpec, stopping: threading.Event) -> RunRecord:
        record = state.load_run(spec.run_id) or RunRecord.new(spec)
        job_id = record.job_id
        if not job_id or status(job_id) in (None, *TERMINAL):
            attempt = 1 + int(job_id.rsplit("-", 1)[-1]) if job_id else 1
            job_id = f"study-{study.name}-{spec.run_id}-{attempt}"
            record.job_id = job_id
            state.save_run(record)
            client.submit_job(
                # The same working directory as `study run` (client commands are
                # relative to it): on shared storage, the same path on every node.
                entrypoint=f"cd {shlex.quote(str(Path.cwd()))} && {sys.executable} -m "
                           f"swarmrl_server.study.ray_jobs {shlex.quote(str(study_path.resolve()))} "
                           f"{spec.run_id}",
                submission_id=job_id, entrypoint_num_cpus=entrypoint_num_cpus)
        while not stopping.is_set():
            current = status(job_id)
            if current in TERMINAL:
                break
            stopping.wait(POLL_S)
        record = state.load_run(spec.run_id) or record
        if not stopping.is_set() and not record.finished:
            tail = client.get_job_logs(job_id)[-500:]
            record.state, record.reason = "failed", f"Ray job {job_id} {current}: {tail}"
            state.save_run(record)
        return record

    return run


def main(argv: list[str] | None = None) -> int:
    """The job's entrypoint: supervises one run until it finishes (or SIGTERM)."""
    from swarmrl_server.study.supervisor import RunSupervisor

    study_path, run_id = (argv if argv is not None else sys.argv[1:])[:2]
    path = Path(study_path)
    study = load_study(path, deep=False)  # `study run` checked it
    state = StudyState(workdir_for(study, path))
    record = state.load_run(run_id)
    if record is None:
        print(f"no record of run {run_id} in {state.workdir}", file=sys.stderr)
        return 2
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    started = time.monotonic()
    final = RunSupervisor(study, state, record.spec(), stopping=stopping).run()
    print(f"run {run_id}: {final.state} ({final.reason}) after {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
