"""`swarmrl_server.launch.ForkedServer`: a forked `swarmrl serve` behaves towards its
supervisor as a spawned one (exit status, its own session, its output appended to its
log). `swarmrl study run` launches its servers so (tests/server/study/), and so does
every test's `ServerProcess`."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from swarmrl_server.launch import ForkedServer
from tests.helpers import free_port, wait_until


def test_a_forked_server_reports_its_exit_status_into_its_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("--- the supervisor's header\n")
    ok = ForkedServer(["--help"], log, cwd=tmp_path)
    assert ok.wait(timeout=60) == 0
    refused = ForkedServer(["--no-such-flag"], log, cwd=tmp_path)
    assert refused.wait(timeout=60) == 2 and refused.poll() == refused.returncode == 2
    text = log.read_text()
    assert text.startswith("--- the supervisor's header\n")  # appended, not truncated
    assert "--train-option" in text and "unrecognized arguments: --no-such-flag" in text


def test_a_forked_server_runs_in_its_own_session_until_signalled(
        tmp_path: Path, model_cache: Path) -> None:
    log, port = tmp_path / "server.log", free_port()
    log.touch()  # read below before the child opens it
    proc = ForkedServer(["--model", "tiny", "--cache-dir", str(model_cache), "--port", str(port),
                         "--http-port", "-1", "--data-dir", str(tmp_path / "data")],
                        log, cwd=tmp_path)
    try:
        wait_until(lambda: f"serving gRPC on 127.0.0.1:{port}" in log.read_text()
                   or proc.poll() is not None, 120, "the server to start")
        assert proc.poll() is None, log.read_text()[-3000:]
        assert os.getsid(proc.pid) == proc.pid != os.getsid(0)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
