"""One run's processes: its server and clients, started, watched, healed and stopped.

The run's server is kept up by a tenacity retry loop: an attempt launches the server
(on the run's fixed ports and data dir, so it resumes from its checkpoint and its
detached clients reconnect), waits for its gRPC health check, and then supervises
until the run finishes or the server goes down (it exits, or fails its health check
for `restarts.unhealthy_s`), which raises `ServerDown`; tenacity waits with
exponential backoff and tries again, `restarts.server` times in the run's life.
Clients are restarted when they exit non-zero (`restarts.client` times); a client
that exits 0 has finished, and a run whose clients have all finished is done.

Every change is written to the run's record (`state.RunRecord`) at once, with the
process ids, so a `study run` that is itself killed leaves a record from which the
next one resumes: it stops what the old one left running and relaunches the server
on the data dir.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import psutil
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from swarmrl_server.launch import SERVER_COMMAND, ForkedServer
from swarmrl_server.net import free_port
from swarmrl_server.study import commands, watch
from swarmrl_server.study.commands import Ports, ProcessSpec
from swarmrl_server.study.schema import RunSpec, Study
from swarmrl_server.study.state import LiveProcess, Restart, RunRecord, StudyState

if TYPE_CHECKING:
    from swarmrl import SwarmClient

log = structlog.get_logger("swarmrl.study")

STATUS_EVERY_S = 2.0
"""How often GetStatus (episodes ended) and the health check are asked."""
STOP_GRACE_S = 60.0
"""How long a stopped server may take to finish its calls and checkpoint."""


class ServerDown(Exception):
    """The run's server exited or stopped answering; the message says how."""


class ClientsExhausted(Exception):
    """A client crashed with no client restarts left."""


def describe_exit(code: int) -> str:
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


Child = subprocess.Popen[bytes] | ForkedServer
"""A process the supervisor started: spawned, or (a `swarmrl serve`) forked (`launch`)."""


def stop_process(proc: psutil.Process | Child, grace: float) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds."""
    with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except (psutil.TimeoutExpired, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(timeout=30)


class RunSupervisor:
    """Runs one experiment to a finished state (or until `stopping` is set)."""

    def __init__(self, study: Study, state: StudyState, spec: RunSpec, *,
                 stopping: threading.Event | None = None, poll_s: float = 0.5,
                 cwd: Path | None = None) -> None:
        self.study, self.state, self.spec = study, state, spec
        self.stopping = stopping or threading.Event()
        self.poll_s = poll_s
        self.cwd = cwd or Path.cwd()
        self.run_dir = state.run_dir(spec.run_id)
        self.record = state.load_run(spec.run_id) or RunRecord.new(spec)
        self.server: Child | None = None
        self.clients: dict[str, Child] = {}
        self.client_specs: dict[str, ProcessSpec] = {}
        self.finished_clients: set[str] = set()
        self.metrics = watch.MetricsTail(self.run_dir / "data" / "metrics.jsonl")
        self._clock = time.monotonic()

    # -- the run ---------------------------------------------------------------------

    def run(self) -> RunRecord:
        rec = self.record
        if rec.finished:
            return rec
        if rec.state == "running":  # an earlier `study run` was stopped or killed mid-run
            self._stop_leftovers()
            rec.restarts.append(Restart(at=time.time(), what="study", step=rec.step,
                                        reason="study run resumed; server relaunched on its "
                                               "data dir"))
        if not rec.grpc_port:
            rec.grpc_port, rec.http_port = free_port(), free_port()
        rec.state = "running"
        self._save()
        ports = Ports(rec.grpc_port, rec.http_port)
        self.client_specs = {p.name: p for p in commands.client_processes(
            self.study, self.spec, self.run_dir, ports)}
        restarts = self.study.restarts
        retrying = Retrying(
            stop=stop_after_attempt(1 + max(restarts.server - rec.count("server"), 0)),
            wait=wait_exponential(multiplier=restarts.backoff_s, max=restarts.backoff_max_s),
            retry=retry_if_exception_type(ServerDown), sleep=self._sleep,
            before_sleep=self._server_down, reraise=True)
        try:
            for attempt in retrying:
                with attempt:
                    self._attempt(ports)
        except ServerDown as down:
            self._finish("failed", f"server down, no restarts left: {down}")
        except ClientsExhausted as err:
            self._finish("failed", str(err))
        except OSError as err:  # a command that cannot be started (not found, not executable)
            self._finish("failed", f"cannot start a process: {err}")
        finally:
            self._stop_all()
            self._save()
        return self.record

    def _attempt(self, ports: Ports) -> None:
        """Launches the server and supervises until the run ends (returns) or the server
        goes down (raises ServerDown)."""
        if self.stopping.is_set() or self.record.finished:
            return
        from swarmrl import ClientConfig, RetryPolicy, SwarmClient

        self._launch_server(ports)
        # Short retries: a server that does not answer within seconds counts as unhealthy
        # here (the SDK's default waits two minutes out, as an agent should).
        config = ClientConfig(target=ports.target, retry=RetryPolicy(timeout=2.0),
                              call_timeout=2.0)
        channel = grpc.insecure_channel(ports.target)
        try:
            with SwarmClient(config=config) as client:
                self._supervise(health_pb2_grpc.HealthStub(channel), client)
        finally:
            channel.close()

    def _supervise(self, health: health_pb2_grpc.HealthStub, client: SwarmClient) -> None:
        next_status, unhealthy_since = 0.0, None
        while not self.stopping.is_set():
            assert self.server is not None
            code = self.server.poll()
            if code is not None:
                raise ServerDown(f"server {describe_exit(code)}")
            if time.monotonic() >= next_status:
                next_status = time.monotonic() + STATUS_EVERY_S
                if self._healthy(health) and self._read_status(client):
                    unhealthy_since = None
                elif unhealthy_since is None:
                    unhealthy_since = time.monotonic()
                elif time.monotonic() - unhealthy_since > self.study.restarts.unhealthy_s:
                    self.server.kill()
                    self.server.wait()
                    raise ServerDown(f"server unhealthy for {self.study.restarts.unhealthy_s:g} s")
            self._tend_clients()
            if self._check_progress():
                return
            self._save()
            self.stopping.wait(self.poll_s)

    # -- processes --------------------------------------------------------------------

    def _popen(self, spec: ProcessSpec) -> Child:
        logs = self.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log_path = logs / f"{spec.name.replace('#', '-')}.log"
        out = open(log_path, "ab")
        out.write(f"--- {time.strftime('%H:%M:%S')} {' '.join(spec.argv)}\n".encode())
        out.flush()
        proc: Child
        if tuple(spec.argv[:3]) == SERVER_COMMAND and not spec.env:
            # `swarmrl serve` in this interpreter: forked with its imports done (a run's
            # server starts in ~1 s, not ~10). A server with an environment of its own is
            # spawned: what it sets may be read at import.
            out.close()
            proc = ForkedServer(spec.argv[3:], log_path, cwd=self.cwd)
        else:
            env = {**os.environ, "PYTHONUNBUFFERED": "1", **spec.env}
            # Their own session: a Ctrl-C at the terminal reaches `study run`, which stops
            # them in order (clients, then the server, which checkpoints).
            proc = subprocess.Popen(spec.argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=self.cwd, start_new_session=True)
            out.close()
        self.record.processes[spec.name] = LiveProcess(
            pid=proc.pid, create_time=psutil.Process(proc.pid).create_time())
        return proc

    def _launch_server(self, ports: Ports) -> None:
        spec = commands.server_process(self.study, self.spec, self.run_dir, ports)
        self.server = self._popen(spec)
        self._save()
        channel = grpc.insecure_channel(ports.target)
        deadline = time.monotonic() + self.study.restarts.start_timeout_s
        try:
            stub = health_pb2_grpc.HealthStub(channel)
            while not self._healthy(stub):
                code = self.server.poll()
                if code is not None:
                    raise ServerDown(f"server {describe_exit(code)} while starting")
                if self.stopping.is_set():
                    return  # `run` stops it
                if time.monotonic() > deadline:
                    self.server.kill()
                    self.server.wait()
                    raise ServerDown("server not healthy within "
                                     f"{self.study.restarts.start_timeout_s:g} s")
                self.stopping.wait(0.2)
        finally:
            channel.close()
        log.info("study_server_up", run=self.spec.run_id, target=ports.target)

    @staticmethod
    def _healthy(stub: health_pb2_grpc.HealthStub) -> bool:
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2.0)
        except grpc.RpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    def _read_status(self, client: SwarmClient) -> bool:
        """Episodes ended, from GetStatus (the budget's count)."""
        from swarmrl import SwarmError

        try:
            self.record.episodes = client.status().ended_episodes
        except SwarmError:
            return False
        return True

    def _tend_clients(self) -> None:
        """Starts clients not running; restarts crashed ones; notes finished ones."""
        for name, spec in self.client_specs.items():
            proc = self.clients.get(name)
            if proc is None and name not in self.finished_clients:
                self.clients[name] = self._popen(spec)
                continue
            if proc is None or (code := proc.poll()) is None:
                continue
            del self.clients[name]
            self.record.processes.pop(name, None)
            if code == 0:
                self.finished_clients.add(name)
                continue
            reason = f"client {name} {describe_exit(code)}"
            if self.record.count("client") >= self.study.restarts.client:
                raise ClientsExhausted(f"{reason}, no client restarts left")
            self.record.restarts.append(Restart(at=time.time(), what=name, reason=reason,
                                                step=self.record.step))
            log.warning("study_client_restart", run=self.spec.run_id, reason=reason)
            self.clients[name] = self._popen(spec)

    def _check_progress(self) -> bool:
        """Reads new metrics; finishes the run on a stop rule, a budget or the clients
        being done. True when it finished."""
        now = time.monotonic()
        self.record.wall_s += now - self._clock
        self._clock = now
        self.metrics.poll()
        p = watch.progress(self.metrics.rows, self.study.metric)
        rec = self.record
        rec.step, rec.metric, rec.best, rec.best_step = p.step, p.metric, p.best, p.best_step
        stop = watch.stop_reason(self.metrics.rows, self.study.stop_rules)
        if stop:
            self._finish("stopped", stop)
            return True
        budget = watch.budget_reason(self.study.budget, step=rec.step, episodes=rec.episodes,
                                     wall_s=rec.wall_s)
        if budget:
            self._finish("done", budget)
            return True
        if self.client_specs and self.finished_clients == set(self.client_specs):
            self._finish("done", "clients finished")
            return True
        return False

    # -- retries, stopping -------------------------------------------------------------

    def _sleep(self, seconds: float) -> None:
        self.stopping.wait(seconds)

    def _server_down(self, retry_state: RetryCallState) -> None:
        """tenacity's before_sleep: the server went down and will be relaunched."""
        outcome = retry_state.outcome
        reason = str(outcome.exception()) if outcome is not None else "server down"
        self.record.processes.pop("server", None)
        self.record.restarts.append(Restart(at=time.time(), what="server", reason=reason,
                                            step=self.record.step))
        self._save()
        log.warning("study_server_restart", run=self.spec.run_id, reason=reason,
                    attempt=retry_state.attempt_number)

    def _finish(self, state: str, reason: str) -> None:
        self._stop_all()
        self.metrics.poll()  # the steps the server wrote while stopping
        p = watch.progress(self.metrics.rows, self.study.metric)
        rec = self.record
        rec.step, rec.metric, rec.best, rec.best_step = p.step, p.metric, p.best, p.best_step
        rec.state, rec.reason = state, reason  # type: ignore[assignment]
        log.info("study_run_finished", run=self.spec.run_id, state=state, reason=reason)
        self._save()

    def _stop_all(self) -> None:
        for name, proc in list(self.clients.items()):
            stop_process(proc, 10.0)
            self.record.processes.pop(name, None)
        self.clients.clear()
        if self.server is not None:
            stop_process(self.server, STOP_GRACE_S)
            self.record.processes.pop("server", None)
            self.server = None

    def _stop_leftovers(self) -> None:
        """Processes an earlier `study run` started and did not stop (it was killed):
        clients first, then the server (SIGTERM: it finishes its step and checkpoints)."""
        names = sorted(self.record.processes, key=lambda n: n == "server")
        for name in names:
            live = self.record.processes.pop(name)
            try:
                proc = psutil.Process(live.pid)
                if abs(proc.create_time() - live.create_time) < 1e-3:
                    stop_process(proc, STOP_GRACE_S if name == "server" else 10.0)
            except psutil.NoSuchProcess:
                pass

    def _save(self) -> None:
        self.state.save_run(self.record)

