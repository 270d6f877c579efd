"""`swarmrl serve` processes forked from a preloaded forkserver, for a command that launches
servers again and again (`swarmrl study run`: every run's server, and its restarts).

`python -m swarmrl_server.cli` spends ~10 s of CPU importing torch, transformers and the
server before it reads a flag. multiprocessing's forkserver imports them once
(`swarmrl_server.launch_preload`, which also freezes them out of the garbage collector's
walks); each server is then a fork of it that runs `swarmrl_server.cli.main` with the
flags, as that command does after its imports: the same code from the flags on.
The forkserver runs nothing but imports: no thread, no event loop, no gRPC channel (what a
fork must not copy). The first server pays the imports, in the forkserver; the next start
in about a second.

A forked server behaves towards its supervisor as a spawned one (`subprocess.Popen`):
its own session (a Ctrl-C at the terminal reaches the supervisor, which stops it in
order), its output appended to its log, its exit status (negative: the signal that
killed it), and a killed supervisor leaves it running. It is the forkserver's child, not
the caller's: its status comes back through multiprocessing.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import os
import subprocess
import sys
from pathlib import Path

SERVER_COMMAND = (sys.executable, "-m", "swarmrl_server.cli")
"""The command line a forked server stands in for (before its flags): `swarmrl serve` in
this interpreter."""


def _forkserver() -> multiprocessing.context.ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["swarmrl_server.launch_preload"])
    return ctx


def _serve(flags: list[str], log_path: str, cwd: str) -> None:
    """In the fork: a session of its own, stdout and stderr appended to the log (line by
    line, as PYTHONUNBUFFERED gives a spawned server), then the server's entry point."""
    os.setsid()
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (the process's own)
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.chdir(cwd)
    from swarmrl_server.cli import main

    main(flags)


class ForkedServer:
    """`swarmrl serve FLAGS` forked from the preloaded forkserver, with the methods of
    `subprocess.Popen` that supervisors use."""

    def __init__(self, flags: list[str], log_path: Path, *, cwd: Path) -> None:
        # Not a daemon: a daemon may not start processes, and a server may (vLLM, Ray,
        # torch.distributed workers).
        self._process = _forkserver().Process(target=_serve, args=(flags, str(log_path),
                                                                   str(cwd)), daemon=False)
        self._process.start()

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired("swarmrl serve (forked)", timeout or 0)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self._process.terminate()

    def kill(self) -> None:
        self._process.kill()
