"""Test helpers: eventual assertions (no sleeps for synchronisation) and server processes."""

from __future__ import annotations

import asyncio
import atexit
import multiprocessing.util  # noqa: F401 (its exit hook, which joins children, registered before ours)
import os
import signal
import subprocess
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

from swarmrl_server.launch import ForkedServer
from swarmrl_server.net import free_port as free_port  # the tests' is the server's

REPO = Path(__file__).resolve().parent.parent


async def assert_eventually(check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Polls `check` (sync or async) until it stops raising AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
            if asyncio.iscoroutine(result):
                result = await result
            return result
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(interval)


async def wait_for_step(trainer: Any, step: int, timeout: float = 60.0) -> None:
    """Waits until `trainer` has done `step` steps; a trainer that failed fails the wait."""
    def reached() -> None:
        if trainer.error is not None:
            raise RuntimeError(f"trainer {trainer.name} failed") from trainer.error
        assert trainer.step >= step, f"trainer {trainer.name} at step {trainer.step} < {step}"
    await assert_eventually(reached, timeout)


def wait_until(check: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def run_dir(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A directory of this test run shared by its xdist workers (their base temp dirs sit
    side by side in it), for what each would otherwise build for itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if worker_id != "master" else base


def need(ok: bool, what: str) -> None:
    """A missing toolchain fails under `make test`, which installs every one (and says so
    with SWARMRL_REQUIRE_STUB_TOOLCHAINS=1), and skips in a bare pytest run."""
    if ok:
        return
    message = f"{what} missing: run scripts/install_stub_toolchains.sh"
    if os.environ.get("SWARMRL_REQUIRE_STUB_TOOLCHAINS") == "1":
        pytest.fail(message)
    pytest.skip(message)


class ChildProcess(Protocol):
    """What the tests use of a server's process: a `subprocess.Popen`, or a `ForkedServer`."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...


_FORKED: weakref.WeakSet[ForkedServer] = weakref.WeakSet()


@atexit.register  # registered after multiprocessing's own exit hook, so it runs first
def _kill_leftovers() -> None:
    """multiprocessing joins a forked server when the worker exits (it is not a daemon):
    kill first any that a failed test left running, as a spawned server would be left
    to die."""
    for proc in list(_FORKED):
        proc.send_signal(signal.SIGKILL)


class ServerProcess:
    """`swarmrl serve` in a child process, killable with SIGKILL and restartable on its port.

    The child is forked from a forkserver that has already imported the server
    (`swarmrl_server.launch`, as `swarmrl study run` starts its servers) and then runs
    `swarmrl_server.cli.main` with the flags: the same code from the flags on as
    `python -m swarmrl_server.cli`, without ~10 s of imports per launch (tests kill and
    restart servers dozens of times). A test that wraps the server in another program (`command`) gets that
    program as a plain child process.
    """

    def __init__(self, *, data_dir: Path, cache_dir: Path, port: int | None = None,
                 http_port: int = -1, extra: list[str] | None = None,
                 command: list[str] | None = None) -> None:
        self.port = port or free_port()
        # What runs the server: `swarmrl serve` unless a test wraps it (tests/crash_server.py).
        self.command = command
        self.http_port = http_port
        self.data_dir = data_dir
        self.cache_dir = cache_dir
        self.extra = extra or []
        self.proc: ChildProcess | None = None
        self.log_path = data_dir.parent / f"server-{self.port}.log"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> ServerProcess:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        flags = ["--port", str(self.port), "--http-port", str(self.http_port),
                 "--data-dir", str(self.data_dir), "--cache-dir", str(self.cache_dir),
                 *self.extra]
        # Only output after this launch counts: a restart appends to the same log. The
        # offset is in bytes, so the log is read as bytes (text indices drift after any
        # non-ASCII output).
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        if self.command is None:
            self.log_path.touch()  # read below before the child opens it
            forked = ForkedServer(flags, self.log_path, cwd=REPO)
            _FORKED.add(forked)
            self.proc = forked
        else:
            log = open(self.log_path, "a")  # noqa: SIM115 (the child's, closed with it)
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            self.proc = subprocess.Popen([*self.command, *flags], stdout=log,
                                         stderr=subprocess.STDOUT, text=True, cwd=REPO, env=env)
        proc = self.proc
        marker = f"serving gRPC on 127.0.0.1:{self.port}"
        wait_until(lambda: marker.encode() in self.log_path.read_bytes()[offset:]
                   or proc.poll() is not None, timeout, "the server to start")
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early:\n{self.log_path.read_text()[-4000:]}")
        return self

    def kill(self) -> None:
        """SIGKILL: no graceful anything, as in a crash."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
