"""Fixtures for the HTTP shim tests (loaded with `pytest_plugins`): servers with HTTP on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.http_support import ScriptedEngine


async def _start(config_kw: dict[str, Any], hosts: Any = None) -> Any:
    from swarmrl_server.app import start_server
    from swarmrl_server.config import ModelSpec, ServerConfig

    config = ServerConfig(models=(ModelSpec("tiny", "tiny"),), port=0, http_port=0,
                          grace_s=0.5, **config_kw)
    return await start_server(config, hosts)


@pytest.fixture
async def http_server(tiny_model_dir: Path, model_cache: Path, tmp_path: Path) -> AsyncIterator[Any]:
    """A real swarm server with the HTTP shim on a free loopback port."""
    running = await _start({"data_dir": tmp_path / "data", "cache_dir": model_cache})
    try:
        yield running
    finally:
        await running.stop()


@pytest.fixture
async def scripted_server(tiny_model_dir: Path, model_cache: Path, tmp_path: Path) -> AsyncIterator[Any]:
    """A server whose model "tiny" replies with `running.script.replies`, in order."""
    from swarmrl_server.engine.hf.engine import HFEngine
    from swarmrl_server.hosting import ModelHost

    engine = ScriptedEngine(HFEngine.from_pretrained("tiny", tiny_model_dir))
    hosts = {"tiny": ModelHost("tiny", engine, "tiny", tiny_model_dir)}
    running = await _start({"data_dir": tmp_path / "data", "cache_dir": model_cache}, hosts)
    running.script = engine
    try:
        yield running
    finally:
        await running.stop()
