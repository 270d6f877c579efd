"""The gRPC door's request context: ids bound for logs, one metric sample per RPC.

The outermost interceptor. It wraps each RPC's behaviour (not `intercept_service`
itself, which grpc.aio may run outside the RPC's task) so the context is set in the
task that serves the RPC, and sees the final status of calls refused by the auth
interceptor as well.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from swarmrl_server.grpc.handlers import Continuation, Handler, Interceptor
from swarmrl_server.logs import new_request_id, request_scope
from swarmrl_server.observe.telemetry import Telemetry, request_timer

_ID_FIELDS = ("episode_id", "session_id", "call_id")


def _ids(request: Any) -> dict[str, str]:
    ids = {f: v for f in _ID_FIELDS if isinstance(v := getattr(request, f, ""), str) and v}
    rid = getattr(request, "request_id", "")
    ids["request_id"] = rid if isinstance(rid, str) and rid else new_request_id()
    return ids


def _code(context: Any, exc: BaseException | None) -> tuple[str, str]:
    if isinstance(exc, asyncio.CancelledError):
        return "CANCELLED", "cancelled"
    code = context.code()
    if code is None:
        return ("OK", "") if exc is None else ("UNKNOWN", repr(exc))
    name = code.name if isinstance(code, grpc.StatusCode) else str(code)
    return name, context.details() or ""


class ObserveInterceptor(Interceptor):
    def __init__(self, telemetry: Telemetry) -> None:
        self._telemetry = telemetry

    async def intercept_service(
        self,
        continuation: Continuation,
        details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(details)
        if handler is None or details.method.startswith("/grpc."):
            return handler  # health and reflection: not ours to count
        method = details.method.rsplit("/", 1)[-1]
        if handler.unary_unary is not None:
            return handler._replace(unary_unary=self._unary(method, handler.unary_unary))  # type: ignore[attr-defined, no-any-return]
        if handler.unary_stream is not None:
            return handler._replace(unary_stream=self._stream(method, handler.unary_stream))  # type: ignore[attr-defined, no-any-return]
        return handler

    def _done(self, method: str, context: Any, seconds: float, exc: BaseException | None) -> None:
        code, message = _code(context, exc)
        self._telemetry.request_done("grpc", method, code, seconds, message)

    def _unary(self, method: str, behavior: Any) -> Any:
        async def unary(request: Any, context: Any) -> Any:
            with request_scope("grpc", rpc=method, **_ids(request)):
                elapsed = request_timer()
                try:
                    response = await behavior(request, context)
                except BaseException as exc:
                    self._done(method, context, elapsed(), exc)
                    raise
                self._done(method, context, elapsed(), None)
                return response

        return unary

    def _stream(self, method: str, behavior: Any) -> Any:
        async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
            with request_scope("grpc", rpc=method, **_ids(request)):
                elapsed = request_timer()
                try:
                    async for response in behavior(request, context):
                        yield response
                except BaseException as exc:
                    self._done(method, context, elapsed(), exc)
                    raise
                self._done(method, context, elapsed(), None)

        return stream
