"""The HTTP door's request context (ids bound for logs) and its metrics; /metrics, the
live JSON of `swarmrl top` and the episode viewer (/view/).

Pure ASGI, so the endpoint runs in the same task and sees the bound context. The
method label is the matched route's template (``/k/{episode_key}/v1/chat/completions``),
never the raw path: raw paths carry episode keys, which are secrets and unbounded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from swarmrl_server.http.errors import HttpError
from swarmrl_server.logs import new_request_id, request_scope
from swarmrl_server.observe.live import snapshot_json
from swarmrl_server.observe.telemetry import Telemetry, request_timer
from swarmrl_server.observe.viewer.source import EpisodeSource
from swarmrl_server.observe.viewer.web import attach_viewer
from swarmrl_server.security import KeyRing, bearer_token
from swarmrl_server.swarm import Swarm

UNMATCHED = "(unmatched)"
QUIET = ("/metrics", "/health")
"""Scrapes and probes: served, not counted (they would drown the request metrics)."""


class RequestContext:
    def __init__(self, app: ASGIApp, telemetry: Telemetry) -> None:
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in QUIET:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        request_id = headers.get(b"x-request-id", b"").decode("latin-1")[:128] or new_request_id()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with request_scope("http", request_id=request_id):
            elapsed = request_timer()
            try:
                await self.app(scope, receive, send_status)
            finally:
                route: Any = scope.get("route")
                method = f"{scope['method']} {getattr(route, 'path', UNMATCHED)}"
                self.telemetry.request_done("http", method, str(status), elapsed())


def require_admin(keys: KeyRing | None) -> Callable[[Request], None]:
    """A FastAPI dependency: with keys configured, only an admin key may look (the live
    view and the episode viewer show every client's episodes)."""

    def check(request: Request) -> None:
        if keys is None or not keys.enabled:
            return
        key = (bearer_token(request.headers.get("authorization", ""))
               or request.query_params.get("key", ""))
        if keys.role(key) != "admin":
            raise HttpError(401, "this page needs an admin API key (Authorization: Bearer KEY "
                                 "or ?key=KEY)", code="UNAUTHENTICATED")

    return check


def attach(app: FastAPI, swarm: Swarm, keys: KeyRing | None = None) -> None:
    """Adds ``GET /metrics`` (Prometheus text format), ``GET /swarmrl/live`` (the protos'
    LiveSnapshot as JSON, as GetLiveSnapshot answers it) and the request-context
    middleware."""
    telemetry = swarm.telemetry
    admin = [Depends(require_admin(keys))]

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(telemetry.exposition(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/swarmrl/live", include_in_schema=False, dependencies=admin)
    async def live() -> dict[str, Any]:
        return snapshot_json(swarm)

    tokenizers = {n: getattr(h.engine, "tokenizer", None) for n, h in swarm.models.items()}
    source = EpisodeSource(swarm.store, {n: t for n, t in tokenizers.items() if t is not None},
                           {n: h.path for n, h in swarm.models.items()},
                           label=f"server {swarm.instance[:12]}")
    attach_viewer(app, source, guard=require_admin(keys))

    app.add_middleware(RequestContext, telemetry=telemetry)
