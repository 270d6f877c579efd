"""`LaunchedServer` supervision, on a stand-in server process (tests/stub_vllm.py): a
server that dies is restarted, and gets the latest synced weights before calls reach it.
(The real `vllm serve` is killed and restarted by test_vllm_crash.py.)"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from swarmrl_server.engine.vllm.server import LaunchedServer
from tests.helpers import REPO, assert_eventually

STUB = REPO / "tests" / "stub_vllm.py"


async def test_a_dead_server_is_restarted_with_the_latest_weights(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 64}')  # a model dir's
    server = LaunchedServer("stub", tmp_path, python=Path(sys.executable), log_dir=tmp_path,
                            launcher=STUB, startup_timeout_s=30)
    await server.start()
    try:
        assert server.ready.is_set() and server.model == "stub" and server.max_model_len == 64
        assert "--logprobs-mode processed_logprobs" in " ".join(server.args)
        assert "--host 127.0.0.1" in " ".join(server.args)
        weights = tmp_path / "v3"
        await server.reload_weights(weights, 3)
        server.latest_weights = (weights, 3)
        first = server.proc
        assert first is not None
        os.kill(first.pid, signal.SIGKILL)

        def restarted() -> None:
            assert server.restarts == 1 and server.proc is not first and server.ready.is_set()

        await assert_eventually(restarted, timeout=30)
        # The new process got the weights (pause -> reload -> reset -> version -> resume).
        calls = (await server.client.get("/calls")).json()
        assert [c.split(" ")[0].split("?")[0] for c in calls] == [
            "/pause", "/collective_rpc", "/reset_prefix_cache", "/update_weight_version", "/resume"]
        assert str(weights) in calls[1] and '"3"' in calls[3]
    finally:
        await server.stop()
    assert server.proc is not None and server.proc.poll() is not None
