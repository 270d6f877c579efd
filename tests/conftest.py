"""Shared fixtures: a tiny model built once per session; servers on loopback come from
tests/server_fixtures.py (`make_server`, `server`, `http_server`, `scripted_server`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Servers on loopback (make_server and the fixtures built on it); the session's vLLM server.
pytest_plugins = ("tests.server_fixtures", "tests.engine_fixtures")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VLLM_FIXTURES = frozenset({"vllm_url", "vllm_lora_url", "own_vllm_url"})
"""Fixtures that launch a real `vllm serve` (tests/engine_fixtures.py; test_vllm_interrupt.py's
module server)."""


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that run a real vLLM server (a `vllm` mark, or a vLLM session fixture) go to
    one xdist worker as one group, first.

    Why one group: a session fixture is per worker, so vLLM tests spread over 3 workers
    would launch 3 copies of each server (each ~1 GiB of KV cache and a CPU at start-up),
    and 3 servers at once is what made the serial suite's end slow. Why first: the group
    is the longest unit of work (`--dist loadgroup` hands out groups in collection
    order), so started last it would finish alone after the others. Without xdist the
    marks change nothing but the order.
    """
    def vllm(item: pytest.Item) -> bool:
        names = set(getattr(item, "fixturenames", ()))
        return item.get_closest_marker("vllm") is not None or bool(VLLM_FIXTURES & names)

    for item in items:
        if vllm(item):
            item.add_marker(pytest.mark.vllm)
            item.add_marker(pytest.mark.xdist_group("vllm"))
    items.sort(key=lambda item: not vllm(item))  # stable: the rest keep their order


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
