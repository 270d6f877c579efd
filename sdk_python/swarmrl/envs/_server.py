"""A ``swarmrl serve`` subprocess for ``swarmrl train`` / ``swarmrl eval`` (or none, attached).

The SDK never imports the server package: it starts ``python -m swarmrl serve`` (the
same interpreter, so the server extra must be installed) and reads the addresses the
server prints once it listens. A started server dies with the command that started it
(on Linux: SIGTERM when its parent dies, ``PR_SET_PDEATHSIG``), so a killed run leaves
no server behind on its data dir; a run started again on that folder first waits for
the old one to be gone (`wait_gone`): two servers on one data dir would corrupt it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ServerProcess"]

_TARGET = re.compile(r"serving gRPC on (\S+)")
_HTTP = re.compile(r"serving OpenAI-compatible HTTP on (\S+)")


@dataclass
class ServerProcess:
    """A server this command started (`proc` set) or attached to (`proc` None)."""

    target: str
    """gRPC address, HOST:PORT."""
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @classmethod
    def start(cls, *, model: str, engine: str | None, train_options: Mapping[str, str] | None,
              data_dir: Path, log_path: Path, extra_args: Sequence[str] = (),
              timeout_s: float = 900.0) -> ServerProcess:
        """Starts ``swarmrl serve`` on free loopback ports and waits until it listens.
        `train_options` None serves without training; ``{}`` trains with the defaults."""
        cmd = [sys.executable, "-m", "swarmrl", "serve", "--model", model, "--port", "0",
               "--http-port", "0", "--data-dir", str(data_dir.resolve())]
        if engine:
            cmd += ["--engine", engine]
        if train_options is not None:
            cmd.append("--train")
            for key, value in train_options.items():
                cmd += ["--train-option", f"{key}={value}"]
        cmd += list(extra_args)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        log_path.parent.mkdir(parents=True, exist_ok=True)
        # A resumed run's server appends to the log: only what this one prints counts.
        offset = log_path.stat().st_size if log_path.exists() else 0
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout_s  # a real model's first load converts weights
        while True:
            text = log_path.read_bytes()[offset:].decode(errors="replace")
            target, http = _TARGET.search(text), _HTTP.search(text)
            if target and http:
                return cls(target.group(1), proc, log_path)
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"the server did not start; see {log_path}:\n{text[-3000:]}")
            time.sleep(0.2)

    def alive(self) -> bool:
        """False once a server this command started has exited."""
        return self.proc is None or self.proc.poll() is None

    def exit_reason(self) -> str:
        """How a started server ended: "exit code N" or "killed by SIGNAME"."""
        code = None if self.proc is None else self.proc.returncode
        if code is None:
            return "running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:  # a signal Python has no name for (a real-time one)
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def stop(self) -> None:
        """Stops a server this command started (SIGTERM: it checkpoints and drains)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def wait_gone(pid: int, data_dir: Path, timeout_s: float = 180.0) -> bool:
    """Waits until process `pid`, if it is a server on `data_dir` (a killed run's, still
    shutting down), has exited; False if it is still there after `timeout_s`."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:  # gone (or no /proc: nothing to wait for)
            return True
        if str(data_dir).encode() not in args:
            return True  # the pid was reused by another process
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
