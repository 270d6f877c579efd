"""Servers on loopback (loaded with `pytest_plugins`): one factory, `make_server`, and the
fixtures most tests use, built on it.

A test that needs a server of its own (other models, training, keys, TLS, engines it
built itself) asks `make_server` for it instead of calling `start_server` by hand, so
every server a test starts is stopped when the test ends, whatever it raised.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.http_support import ScriptedEngine

if TYPE_CHECKING:
    from swarmrl_server.app import RunningServer
    from swarmrl_server.config import ServerConfig
    from swarmrl_server.hosting import ModelHost


class ServerFactory:
    """Starts real swarm servers for one test and stops, at teardown, every one still up.

    By default a server is gRPC on 127.0.0.1:0 with the tiny model, SQLite in the test's
    tmp_path ("data"), the session's model cache, no HTTP shim and a 0.5 s grace.
    """

    def __init__(self, data_dir: Path, cache_dir: Path) -> None:
        self.data_dir = data_dir
        self.cache_dir = cache_dir
        self.running: list[RunningServer] = []

    async def __call__(self, config: ServerConfig | None = None, /, *, http: bool = False,
                       train: Mapping[str, str] | None = None,
                       hosts: dict[str, ModelHost] | None = None, **fields: Any) -> RunningServer:
        """Starts a server and returns its `RunningServer`.

        config: a whole `ServerConfig`, started as it is (one parsed from command-line
            flags; a stopped server's, to start again on its data dir). Without it, the
            defaults above changed by `http`, `train` and `fields`.
        http: the OpenAI/Anthropic shim on a free loopback port.
        train: train the models, with these train options.
        hosts: engines the test built, served instead of loading the models.
        fields: any other `ServerConfig` field (models, data_dir, admin_keys, ...).
        """
        from swarmrl_server.app import start_server
        from swarmrl_server.config import ModelSpec, ServerConfig

        if config is None:
            defaults: dict[str, Any] = {
                "models": (ModelSpec("tiny", "tiny"),), "port": 0,
                "http_port": 0 if http else None, "data_dir": self.data_dir,
                "cache_dir": self.cache_dir, "grace_s": 0.5,
            }
            if train is not None:
                defaults.update(train=True, train_options=dict(train))
            config = ServerConfig(**{**defaults, **fields})
        elif http or train is not None or fields:
            raise TypeError("make_server: pass a whole config or its changes, not both")
        running = await start_server(config, hosts)
        self.running.append(running)
        return running

    async def stop(self, running: RunningServer) -> None:
        """Stops `running` now (e.g. to start another server on its data dir)."""
        self.running.remove(running)
        await running.stop()

    async def stop_all(self) -> None:
        """Stops every server still up, the last started first; raises the first error."""
        errors: list[BaseException] = []
        while self.running:
            try:
                await self.running.pop().stop()
            except BaseException as err:  # the others must still stop
                errors.append(err)
        if errors:
            raise errors[0]


@pytest.fixture
async def make_server(tiny_model_dir: Path, model_cache: Path,
                      tmp_path: Path) -> AsyncIterator[ServerFactory]:
    """`await make_server(**changes)`: a real swarm server, stopped at teardown."""
    factory = ServerFactory(tmp_path / "data", model_cache)
    try:
        yield factory
    finally:
        await factory.stop_all()


@pytest.fixture
async def server(make_server: ServerFactory) -> Any:
    """A real swarm server (gRPC on 127.0.0.1:0, tiny model, SQLite in tmp_path)."""
    return await make_server()


@pytest.fixture
async def http_server(make_server: ServerFactory) -> Any:
    """A real swarm server with the HTTP shim on a free loopback port."""
    return await make_server(http=True)


@pytest.fixture
async def scripted_server(make_server: ServerFactory, tiny_model_dir: Path) -> Any:
    """A server whose model "tiny" replies with `running.script.replies`, in order."""
    from swarmrl_server.engine.hf.engine import HFEngine
    from swarmrl_server.hosting import ModelHost

    engine = ScriptedEngine(HFEngine.from_pretrained("tiny", tiny_model_dir))
    hosts = {"tiny": ModelHost("tiny", engine, "tiny", tiny_model_dir)}
    running = await make_server(http=True, hosts=hosts)
    running.script = engine
    return running
