"""Shared fixtures: a tiny model built once per session, and servers on loopback."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

# Servers with the HTTP shim on (http_server, scripted_server); the session's vLLM server.
pytest_plugins = ("tests.http_fixtures", "tests.engine_fixtures")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session", autouse=True)
def _torch_threads() -> None:
    """Half the cores for torch, as the server picks: on a shared 2-core machine an
    OpenMP team of 2 spins against every other process and runs many times slower."""
    import torch

    from swarmrl_server.config import default_torch_threads

    torch.set_num_threads(default_torch_threads())


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache shared by the session's in-process and subprocess servers."""
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="session")
def tiny_model_dir(model_cache: Path) -> Path:
    from swarmrl_server.models import resolve_model

    return resolve_model("tiny", model_cache)


@pytest.fixture
async def server(tiny_model_dir: Path, model_cache: Path, tmp_path: Path) -> AsyncIterator[object]:
    """A real swarm server (gRPC on 127.0.0.1:0, tiny model, SQLite in tmp_path)."""
    from swarmrl_server.app import start_server
    from swarmrl_server.config import ModelSpec, ServerConfig

    config = ServerConfig(
        models=(ModelSpec("tiny", "tiny"),), port=0, http_port=None,
        data_dir=tmp_path / "data", cache_dir=model_cache, grace_s=0.5,
    )
    running = await start_server(config)
    try:
        yield running
    finally:
        await running.stop()
