"""SwarmError → canonical gRPC status with google.rpc details.

Every servicer method is wrapped by `translate_errors`: domain errors become
`abort_with_status` carrying ErrorInfo (reason, domain, metadata), BadRequest
(the offending field) and RetryInfo (when to try again); anything unexpected
becomes INTERNAL without leaking a traceback, and the server stays up.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import grpc
import structlog
from google.protobuf import any_pb2, duration_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from swarmrl_server.errors import DOMAIN, Code, SwarmError, internal
from swarmrl_server.grpc.handlers import Context, abort_with_status

log = structlog.get_logger("swarmrl.grpc")

F = TypeVar("F", bound=Callable[..., Any])

STATUS: dict[Code, grpc.StatusCode] = {code: grpc.StatusCode[code.name] for code in Code}
"""The domain's codes are the canonical ones, so each maps to the gRPC status of its name."""


def to_status(err: SwarmError) -> grpc.Status:
    details: list[Message] = []
    info = error_details_pb2.ErrorInfo(reason=err.reason.value, domain=DOMAIN, metadata=err.metadata)
    details.append(info)
    if err.field is not None:
        details.append(
            error_details_pb2.BadRequest(
                field_violations=[
                    error_details_pb2.BadRequest.FieldViolation(
                        field=err.field, description=err.message
                    )
                ]
            )
        )
    if err.retry_after_s is not None:
        delay = duration_pb2.Duration()
        delay.FromNanoseconds(int(err.retry_after_s * 1e9))
        details.append(error_details_pb2.RetryInfo(retry_delay=delay))
    packed = []
    for d in details:
        a = any_pb2.Any()
        a.Pack(d)
        packed.append(a)
    return rpc_status.to_status(
        status_pb2.Status(code=STATUS[err.code].value[0], message=err.message, details=packed)
    )


async def _abort(context: Context, exc: BaseException, method: str) -> None:
    if isinstance(exc, SwarmError):
        log.debug("rpc_error", method=method, code=exc.code.name, reason=exc.reason.value)
        await abort_with_status(context, to_status(exc))
    log.exception("rpc_internal_error", method=method)
    await abort_with_status(context, to_status(internal(f"internal error in {method}")))


def translate_errors(fn: F) -> F:
    """Wraps a unary or server-streaming servicer method."""
    name = fn.__name__
    if inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def stream(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
            try:
                async for item in fn(self, request, context):
                    yield item
            except (grpc.aio.AbortError, GeneratorExit):
                raise
            except Exception as exc:
                await _abort(context, exc, name)

        return stream  # type: ignore[return-value]

    @functools.wraps(fn)
    async def unary(self: Any, request: Any, context: Any) -> Any:
        try:
            return await fn(self, request, context)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            await _abort(context, exc, name)

    return unary  # type: ignore[return-value]
