"""Errors over HTTP: one exception type, mapped from `SwarmError`, rendered per API.

Domain code raises `SwarmError` with a gRPC status code; here that code becomes
an HTTP status (INVALID_ARGUMENT 400, UNAUTHENTICATED 401, NOT_FOUND 404,
FAILED_PRECONDITION 409, RESOURCE_EXHAUSTED 413, UNAVAILABLE 429/503 with
Retry-After) and the body takes the shape of the API the client speaks: OpenAI's
`{"error": {...}}` or Anthropic's `{"type": "error", "error": {...}}`. Errors after
a stream has started travel as an SSE event, because the status line is gone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from fastapi.responses import JSONResponse

from swarmrl_server.errors import Code, Reason, SwarmError
from swarmrl_server.http.protocol import (
    AnthropicErrorInfo,
    AnthropicErrorResponse,
    ErrorInfo,
    ErrorResponse,
)

OPENAI_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 409: "conflict_error", 413: "request_too_large",
    429: "rate_limit_error", 500: "server_error", 503: "service_unavailable",
    504: "timeout_error",
}
ANTHROPIC_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 409: "invalid_request_error", 413: "request_too_large",
    429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 504: "api_error",
}


class HttpError(Exception):
    """A failure to report with an HTTP status, rendered in the client's API's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.retry_after_s = retry_after_s

    def __repr__(self) -> str:
        return f"HttpError({self.status}, {self.message!r}, param={self.param!r})"

    @property
    def headers(self) -> dict[str, str]:
        if self.retry_after_s is None:
            return {}
        # Retry-After takes whole seconds; the OpenAI client also reads retry-after-ms.
        return {
            "Retry-After": str(max(1, math.ceil(self.retry_after_s))),
            "retry-after-ms": str(max(1, int(self.retry_after_s * 1000))),
        }

    def openai_body(self) -> dict[str, Any]:
        info = ErrorInfo(
            message=self.message, type=OPENAI_TYPES.get(self.status, "server_error"),
            param=self.param, code=self.code,
        )
        return ErrorResponse(error=info).model_dump()

    def anthropic_body(self) -> dict[str, Any]:
        info = AnthropicErrorInfo(
            type=ANTHROPIC_TYPES.get(self.status, "api_error"), message=self.message
        )
        return AnthropicErrorResponse(error=info).model_dump()

    def response(self, api: str) -> JSONResponse:
        body = self.anthropic_body() if api == "anthropic" else self.openai_body()
        return JSONResponse(body, status_code=self.status, headers=self.headers)


def from_swarm_error(err: SwarmError, params: Mapping[str, str] | None = None) -> HttpError:
    """Maps a domain error to HTTP; `params` renames domain field paths to request fields
    (longest matching prefix wins, e.g. {"sampling.max_tokens": "max_tokens"})."""
    status = _status(err)
    param = _rename(err.field, params or {}) if err.field else None
    message = err.message
    if err.field and param and param != err.field and message.startswith(f"{err.field}:"):
        message = f"{param}:{message[len(err.field) + 1:]}"
    if param is None and err.reason is Reason.MODEL_NOT_FOUND:
        param = "model"
    retry = err.retry_after_s if status in (429, 503) else None
    if status in (429, 503) and retry is None:
        retry = 1.0
    return HttpError(status, message, param=param, code=err.reason.value, retry_after_s=retry)


STATUS: dict[Code, int] = {
    Code.INVALID_ARGUMENT: 400,
    Code.OUT_OF_RANGE: 400,
    Code.UNAUTHENTICATED: 401,
    Code.PERMISSION_DENIED: 403,
    Code.NOT_FOUND: 404,
    Code.FAILED_PRECONDITION: 409,
    Code.ALREADY_EXISTS: 409,
    Code.ABORTED: 409,
    Code.RESOURCE_EXHAUSTED: 413,
    Code.UNAVAILABLE: 503,
    Code.DEADLINE_EXCEEDED: 504,
    Code.INTERNAL: 500,
}
"""Each domain code's HTTP status (the one table; 429 is by reason, below)."""


def _status(err: SwarmError) -> int:
    if err.reason in (Reason.GENERATION_PAUSED, Reason.OVER_CAPACITY):
        return 429
    return STATUS[err.code]


def _rename(field: str, params: Mapping[str, str]) -> str:
    for prefix in sorted(params, key=len, reverse=True):
        if field == prefix or field.startswith((prefix + ".", prefix + "[")):
            new = params[prefix] + field[len(prefix):]
            return new.lstrip(".")
    return field


def internal_error(exc: BaseException) -> HttpError:
    """A bug: the message names the exception type only (details stay in the log)."""
    return HttpError(500, f"internal server error ({type(exc).__name__})", code="INTERNAL")


def openai_stream_error(err: HttpError) -> str:
    """vLLM's create_streaming_error_response: the error body as an SSE data event."""
    return f"data: {json.dumps(err.openai_body())}\n\n"


def anthropic_stream_error(err: HttpError) -> str:
    return f"event: error\ndata: {json.dumps(err.anthropic_body())}\n\n"


_TYPE_TAGS = {"str", "int", "float", "bool", "list", "dict", "none", "tagged-union"}


def param_from_loc(loc: tuple[Any, ...]) -> str | None:
    """A pydantic error location as a request field path: ("body", "messages", 0,
    "content") -> "messages[0].content" (union member tags such as "list[...]" dropped)."""
    path = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif (isinstance(part, str) and part.isidentifier() and not part[0].isupper()
              and part not in _TYPE_TAGS):  # model-class and type tags of union members
            path += f".{part}" if path else part
    return path or None
