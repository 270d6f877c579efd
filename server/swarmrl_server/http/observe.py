"""The HTTP door's request context (ids bound for logs) and its metrics, plus /metrics.

Pure ASGI, so the endpoint runs in the same task and sees the bound context. The
method label is the matched route's template (``/k/{episode_key}/v1/chat/completions``),
never the raw path: raw paths carry episode keys, which are secrets and unbounded.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from swarmrl_server.logs import new_request_id, request_scope
from swarmrl_server.telemetry import Telemetry, request_timer

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


def attach(app: FastAPI, telemetry: Telemetry) -> None:
    """Adds ``GET /metrics`` (Prometheus text format) and the request-context middleware."""

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(telemetry.exposition(), media_type=CONTENT_TYPE_LATEST)

    app.add_middleware(RequestContext, telemetry=telemetry)
