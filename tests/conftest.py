"""Shared fixtures: a tiny model built once per session; servers on loopback come from
tests/server_fixtures.py (`make_server`, `server`, `http_server`, `scripted_server`)."""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_dir

# Servers on loopback (make_server and the fixtures built on it); the session's vLLM server.
pytest_plugins = ("tests.server_fixtures", "tests.engine_fixtures")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

VLLM_FIXTURES = frozenset({"vllm_url"})
"""Fixtures that launch a real `vllm serve` (tests/engine_fixtures.py)."""


def in_vllm_group(nodeid: str) -> bool:
    """Whether a test goes to the vLLM group, told from its id alone (the xdist controller,
    which schedules, sees only ids: it does not collect). Every test that runs a real
    vLLM server names vLLM in its id (its file, its name or its engine parameter);
    `pytest_collection_modifyitems` refuses a vLLM test that does not."""
    return "vllm" in nodeid


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, object, object]:
    """Collection with the cyclic collector paused, then its heap frozen
    (swarmrl_server.heap). Collecting imports torch, transformers and the clients: ~0.8
    million objects per worker that live until it exits. Measured on the fast tier, per
    worker: 15 full collections while collecting (4.6 s) and 20 during the tests (7.7 s
    more), each walking those objects. Frozen (with the server's own freezes), the tier
    used 0.89x the CPU, alternated twice on one machine."""
    from swarmrl_server.heap import long_lived

    with long_lived():
        return (yield)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the tests that run a real vLLM server (a `vllm` mark, or a vLLM fixture) and
    puts them first, then the `slow` ones; refuses a vLLM test the scheduler would not
    group (`in_vllm_group`). Units go out in this order: longest first, so no minute-long
    test starts last and finishes alone while the other workers sit idle."""
    def vllm(item: pytest.Item) -> bool:
        names = set(getattr(item, "fixturenames", ()))
        return item.get_closest_marker("vllm") is not None or bool(VLLM_FIXTURES & names)

    for item in items:
        if vllm(item):
            if not in_vllm_group(item.nodeid):
                raise pytest.UsageError(f"{item.nodeid} runs a real vLLM server: its id must "
                                        "name vllm, so xdist groups it (tests/conftest.py)")
            item.add_marker(pytest.mark.vllm)
    # Stable: each class keeps its order.
    items.sort(key=lambda item: (not vllm(item), item.get_closest_marker("slow") is None))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The xdist scheduler of `make test`: every test on its own, but the vLLM tests as one
    unit on one worker, handed out first.

    Why one unit: a session fixture is per worker, so vLLM tests spread over 3 workers
    would launch 3 copies of each server (each ~1 GiB of KV cache and a core at
    start-up). Why first: the unit is the longest piece of work (units go out in
    collection order), so started last it would finish alone after the others. (xdist's
    own `--dist loadgroup` does this with `xdist_group` marks, but it tags the ids
    through an attribute pytest 9 no longer reads, so it groups nothing.)
    """
    from xdist.scheduler import LoadScopeScheduling

    class VLLMGrouped(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return "vllm" if in_vllm_group(nodeid) else nodeid

    return VLLMGrouped(config, log)


@pytest.fixture(scope="session", autouse=True)
def _torch_threads() -> None:
    """Half the cores for torch, as the server picks: on a shared 2-core machine an
    OpenMP team of 2 spins against every other process and runs many times slower."""
    import torch

    from swarmrl_server.config import default_torch_threads

    torch.set_num_threads(default_torch_threads())


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A model cache shared by the session's in-process and subprocess servers, and by the
    xdist workers: a model is built once per run (a build is atomic, models/_atomic.py,
    so two builders never leave half a model)."""
    cache = run_dir(tmp_path_factory, worker_id) / "model-cache"
    cache.mkdir(exist_ok=True)
    return cache


@pytest.fixture(scope="session")
def tiny_model_dir(model_cache: Path) -> Path:
    from filelock import FileLock

    from swarmrl_server.models import resolve_model

    with FileLock(model_cache / "tiny.lock"):  # the other workers wait, then reuse it
        return resolve_model("tiny", model_cache)


@pytest.fixture(scope="session")
def textworld_games(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """One directory of compiled TextWorld games per test run, shared by the xdist
    workers. A game is made from its level and seed alone, and examples/textworld/env.py
    reuses a game file it finds (and renames a new one into place whole), so tests that
    play the same games share them instead of each compiling them again (Inform 7, about
    a second a game). A test that edits a games directory makes its own."""
    games = run_dir(tmp_path_factory, worker_id) / "textworld-games"
    games.mkdir(exist_ok=True)
    return games
