"""OpenEnv's server side for `swarmrl.envs.openenv`: serving an Environment class with
OpenEnv's own ``create_app``, and the errors its server sends."""

from __future__ import annotations

import functools
import importlib
import json
import re
import threading
import time
import urllib.request
from typing import Any

__all__ = ["LocalServer", "ServerError", "env_classes", "get_json"]

_CODE = re.compile(r"\(code: ([A-Z_]+)\)\s*$")


class ServerError(RuntimeError):
    """An error frame of the environment server, with its code (VALIDATION_ERROR, ...).

    OpenEnv's client gives only text: ``RuntimeError("Server error: MESSAGE (code:
    CODE)")`` in 0.10 (the version `swarmrl.envs.openenv` checks at load). A frame whose
    code cannot be read keeps ``code`` empty: it is raised as the environment's failure,
    never taken for a model's invalid action or a full server."""

    def __init__(self, error: RuntimeError) -> None:
        super().__init__(str(error))
        match = _CODE.search(str(error))
        self.code = match.group(1) if match else ""


class LocalServer:
    """An OpenEnv ``Environment`` class served by OpenEnv's ``create_app`` under uvicorn,
    on 127.0.0.1 and a free port, in a thread with its own event loop (the rollouts' loop
    never waits on the environment's code, nor the environment on theirs)."""

    @classmethod
    def serve(cls, env: Any, env_args: dict[str, Any], classes: tuple[Any, Any], name: str,
              max_sessions: int | None) -> tuple[LocalServer, int, bool]:
        """A server (not started yet) of `env`, an Environment class or factory, with its
        Action and Observation `classes` (None: found by `env_classes`); also the sessions
        it allows (`max_sessions`, default 64 for an environment that declares
        ``SUPPORTS_CONCURRENT_SESSIONS``, else 1) and whether it is an MCPEnvironment."""
        http_server = importlib.import_module("openenv.core.env_server.http_server")
        mcp_env = importlib.import_module("openenv.core.env_server.mcp_environment")
        action_cls, observation_cls = classes
        if action_cls is None or observation_cls is None:
            found = env_classes(env)
            action_cls, observation_cls = action_cls or found[0], observation_cls or found[1]
        if max_sessions is None:
            max_sessions = 64 if getattr(env, "SUPPORTS_CONCURRENT_SESSIONS", False) else 1
        factory = functools.partial(env, **env_args) if env_args else env
        app = http_server.create_app(factory, action_cls, observation_cls, env_name=name,
                                     max_concurrent_envs=max_sessions)
        is_mcp = isinstance(env, type) and issubclass(env, mcp_env.MCPEnvironment)
        return cls(app), max_sessions, is_mcp

    def __init__(self, app: Any) -> None:
        import uvicorn

        self._server = uvicorn.Server(uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, name="openenv-server",
                                        daemon=True)
        self.url = ""

    def start(self, timeout_s: float = 60.0) -> str:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the OpenEnv server did not start")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)


def env_classes(env_cls: Any) -> tuple[Any, Any]:
    """The Action and Observation classes of an OpenEnv Environment class: its generic
    parameters (``Environment[MyAction, MyObservation, MyState]``), or the MCP ones for an
    ``MCPEnvironment``."""
    import typing

    types = importlib.import_module("openenv.core.env_server.types")
    mcp = importlib.import_module("openenv.core.env_server.mcp_types")
    mcp_env = importlib.import_module("openenv.core.env_server.mcp_environment")
    for klass in getattr(env_cls, "__mro__", ()):
        for base in getattr(klass, "__orig_bases__", ()):
            params = typing.get_args(base)
            if (len(params) >= 2 and isinstance(params[0], type) and isinstance(params[1], type)
                    and issubclass(params[0], types.Action)
                    and issubclass(params[1], types.Observation)):
                return params[0], params[1]
    if isinstance(env_cls, type) and issubclass(env_cls, mcp_env.MCPEnvironment):
        return mcp.CallToolAction, mcp.CallToolObservation
    raise ValueError(f"{env_cls!r}: cannot tell its Action and Observation classes; pass "
                     "action_cls=module:Class and observation_cls=module:Class")


def get_json(url: str, path: str) -> dict[str, Any]:
    """GET ``url + path`` of an OpenEnv server (its ``/schema``, ``/health``) as JSON."""
    base = url.replace("ws://", "http://").replace("wss://", "https://").rstrip("/")
    with urllib.request.urlopen(base + path, timeout=30) as answer:  # noqa: S310 - our URL
        data: dict[str, Any] = json.loads(answer.read())
    return data
