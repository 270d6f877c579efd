"""The FastAPI app of the OpenAI/Anthropic-compatible shim, and uvicorn in our event loop.

`build_app` wires one handler object per endpoint onto `app.state` (as vLLM's
api_server does) and renders every failure in the shape of the API its route
speaks. `HttpServer` runs uvicorn inside the server's own asyncio loop, next to
gRPC, over the same `Swarm`: no second process, no second copy of a model.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from swarmrl_server.errors import SwarmError
from swarmrl_server.http.auth import PATH_KEY, EpisodeAuth
from swarmrl_server.http.chat_completion.api_router import attach_router as attach_chat
from swarmrl_server.http.chat_completion.serving import OpenAIServingChat
from swarmrl_server.http.completion.api_router import attach_router as attach_completion
from swarmrl_server.http.completion.serving import OpenAIServingCompletion
from swarmrl_server.http.errors import HttpError, from_swarm_error, internal_error, param_from_loc
from swarmrl_server.http.messages.api_router import attach_router as attach_messages
from swarmrl_server.http.messages.serving import AnthropicServingMessages
from swarmrl_server.http.models.api_router import attach_router as attach_models
from swarmrl_server.http.models.serving import OpenAIServingModels
from swarmrl_server.http.observe import attach as attach_observability
from swarmrl_server.http.protocol import log
from swarmrl_server.http.responses.api_router import attach_router as attach_responses
from swarmrl_server.http.responses.serving import OpenAIServingResponses
from swarmrl_server.http.sse import ClientDisconnected
from swarmrl_server.security import KeyRing
from swarmrl_server.swarm import Swarm

MAX_BODY_BYTES = 32 * 1024 * 1024
"""Largest request body accepted (a long token-id prompt is big); larger is a 413."""
KEEP_ALIVE_S = 300
"""How long an idle keep-alive connection stays open."""
CLIENT_CLOSED = 499
"""Status logged for a request whose client went away (nginx's convention)."""


def api_of(path: str) -> str:
    """Which API's error shape a path speaks: "anthropic" for /v1/messages*, else "openai"."""
    return "anthropic" if "/v1/messages" in path else "openai"


class BodyLimit:
    """Pure ASGI: refuses bodies over `max_bytes` with 413, by Content-Length up front and
    by counting chunked bodies as they arrive."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = HttpError(413, f"request body exceeds {self.max_bytes} bytes",
                              code="REQUEST_TOO_LARGE")
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await too_large.response(api_of(scope["path"]))(scope, receive, send)
            return
        seen = 0

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # FastAPI re-raises HTTPExceptions raised while it reads the body.
                    raise StarletteHTTPException(413, too_large.message)
            return message

        await self.app(scope, counting_receive, send)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HttpError)
    async def on_http_error(request: Request, exc: HttpError) -> JSONResponse:
        return exc.response(api_of(request.url.path))

    @app.exception_handler(SwarmError)
    async def on_swarm_error(request: Request, exc: SwarmError) -> JSONResponse:
        return from_swarm_error(exc).response(api_of(request.url.path))

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {}
        loc = tuple(first.get("loc", ()))
        # A refused sampling setting (an extra has no location) names itself in ctx.
        param = param_from_loc(loc) or (first.get("ctx") or {}).get("param")
        if first.get("type") == "json_invalid":
            message = "the request body is not valid JSON"
        elif first.get("type") == "missing" and param:
            message = f"{param}: field required"
        else:
            message = f"{param or 'body'}: {first.get('msg', 'invalid value')}"
        return HttpError(400, message, param=param, code="INVALID_FIELD").response(
            api_of(request.url.path))

    @app.exception_handler(StarletteHTTPException)
    async def on_starlette(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return HttpError(exc.status_code, str(exc.detail)).response(api_of(request.url.path))

    @app.exception_handler(ClientDisconnected)
    async def on_disconnect(request: Request, exc: ClientDisconnected) -> Response:
        log.info("client_disconnected", path=request.url.path)
        return Response(status_code=CLIENT_CLOSED)

    @app.exception_handler(Exception)
    async def on_bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("http_handler_failed", path=request.url.path)
        return internal_error(exc).response(api_of(request.url.path))


def build_app(
    swarm: Swarm, *, server_keys: KeyRing | None = None, max_body_bytes: int = MAX_BODY_BYTES
) -> FastAPI:
    """The shim's ASGI app over `swarm`.

    Every route exists twice: at `/v1/...` (the episode key travels as a header) and at
    `/k/{episode_key}/v1/...` (the key is part of the base URL, for harnesses that let
    one set a base URL but not a key).
    """
    app = FastAPI(title="swarmrl OpenAI-compatible API", docs_url=None, redoc_url=None)
    auth = EpisodeAuth(swarm, server_keys)
    app.state.swarm = swarm
    app.state.openai_serving_chat = OpenAIServingChat(swarm, auth)
    app.state.openai_serving_completion = OpenAIServingCompletion(swarm, auth)
    app.state.openai_serving_models = OpenAIServingModels(swarm, auth)
    app.state.anthropic_serving_messages = AnthropicServingMessages(swarm, auth)
    app.state.openai_serving_responses = OpenAIServingResponses(swarm, auth)
    for prefix in ("", f"/k/{{{PATH_KEY}}}"):
        attach_chat(app, prefix)
        attach_completion(app, prefix)
        attach_models(app, prefix)
        attach_messages(app, prefix)
        attach_responses(app, prefix)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "paused" if swarm.paused_reason else "ok"}

    _install_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    attach_observability(app, swarm, server_keys)  # /metrics; outermost: sees every status
    return app


class _InLoopServer(uvicorn.Server):
    """uvicorn without its signal handlers: the host process owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def url_host(host: str) -> str:
    """The host clients should use in URLs: a wildcard bind gets this machine's name."""
    if host in ("", "0.0.0.0", "::"):
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host


def listening_socket(family: socket.AddressFamily) -> socket.socket:
    """A TCP listening socket whose accepted connections have Nagle's algorithm off.

    uvicorn writes a response's head and body as separate sends. With Nagle on, the
    body waits for the client to ACK the head, and a keep-alive client delays that
    ACK by ~40 ms: every call after a connection's first stalled 40 ms. asyncio turns
    TCP_NODELAY on for accepted sockets only when the listener says `IPPROTO_TCP`
    (a bare `socket(AF_INET, SOCK_STREAM)` has proto 0), and Linux also copies the
    listener's TCP_NODELAY onto each accepted socket: we do both.
    """
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class HttpServer:
    """The shim on `host:port` (0 = a free port), served by uvicorn in the running loop."""

    def __init__(self, app: FastAPI, host: str, port: int, *, grace_s: float = 5.0,
                 tls: tuple[Path, Path] | None = None) -> None:
        self.app = app
        self._tls = tls
        """(certificate chain, private key) in PEM: serve HTTPS, as gRPC does with them."""
        self.host = host
        self._requested_port = port
        self.port = 0
        self._grace_s = grace_s
        self._server: _InLoopServer | None = None
        self._task: asyncio.Task[None] | None = None
        self._sock: socket.socket | None = None

    @property
    def base_url(self) -> str:
        """Root URL, e.g. http://127.0.0.1:8000 (ANTHROPIC_BASE_URL takes this one)."""
        scheme = "https" if self._tls else "http"
        return f"{scheme}://{url_host(self.host)}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """OpenAI base URL, e.g. http://127.0.0.1:8000/v1 (OPENAI_BASE_URL takes this one)."""
        return f"{self.base_url}/v1"

    async def start(self) -> None:
        # Bind ourselves so that port 0 works and the chosen port is known at once.
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = listening_socket(family)
        try:
            sock.bind((self.host, self._requested_port))
        except OSError:
            sock.close()
            raise
        sock.set_inheritable(True)
        self._sock = sock
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app, lifespan="off", log_config=None, access_log=False,
            timeout_graceful_shutdown=max(1, round(self._grace_s)), ws="none",
            # Agents idle between calls while their tools run: a keep-alive connection
            # the server drops after uvicorn's default 5 s races the client's next
            # request on it (a connection error). Keep idle connections for minutes.
            timeout_keep_alive=KEEP_ALIVE_S,
            ssl_certfile=str(self._tls[0]) if self._tls else None,
            ssl_keyfile=str(self._tls[1]) if self._tls else None,
        )
        self._server = _InLoopServer(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises why it could not start
                raise RuntimeError("the HTTP server stopped while starting")
            await asyncio.sleep(0.01)
        log.info("http_listening", url=self.openai_base_url)

    async def stop(self) -> None:
        """Stops accepting, lets requests in flight finish for the grace period, then
        cancels them (their engine requests are cancelled, nothing half is recorded)."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await self._task
        finally:
            self._server = None
            self._task = None
            if self._sock is not None:
                self._sock.close()
