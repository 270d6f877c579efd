"""Typed errors, one class per canonical gRPC status code.

Every failed call raises a subclass of `SwarmError`; user code never sees
`grpc.RpcError`. The server attaches google.rpc error details to its statuses,
and `from_grpc_error` unpacks them onto the exception::

    SwarmError(Exception)            .code .reason .field .retry_delay .details .message
    ├── InvalidArgumentError         INVALID_ARGUMENT (bad input; .field names it)
    ├── NotFoundError                NOT_FOUND (unknown episode, model, session, call)
    ├── AlreadyExistsError           ALREADY_EXISTS
    ├── FailedPreconditionError      FAILED_PRECONDITION (episode not open, reward missing)
    ├── AbortedError                 ABORTED
    ├── OutOfRangeError              OUT_OF_RANGE
    ├── UnauthenticatedError         UNAUTHENTICATED (missing or wrong API key)
    ├── PermissionDeniedError        PERMISSION_DENIED (the key's role does not allow it)
    ├── ResourceExhaustedError       RESOURCE_EXHAUSTED (server over capacity)
    ├── UnavailableError             UNAVAILABLE (unreachable, paused; retried for you)
    │   └── StreamInterruptedError   a started stream broke; the call can be re-issued
    ├── DeadlineExceededError        DEADLINE_EXCEEDED
    ├── CancelledError               CANCELLED
    ├── InternalError                INTERNAL
    ├── UnimplementedError           UNIMPLEMENTED
    └── UnknownError                 UNKNOWN

A status code without a class of its own (DATA_LOSS) raises `SwarmError` itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

__all__ = [
    "AbortedError",
    "AlreadyExistsError",
    "CancelledError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "StreamInterruptedError",
    "SwarmError",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "UnknownError",
    "from_grpc_error",
]


class SwarmError(Exception):
    """A call to the swarm server failed.

    Attributes:
        code: The canonical gRPC status code.
        message: The server's (or the SDK's) description of the failure.
        reason: Stable UPPER_SNAKE reason from google.rpc.ErrorInfo, e.g.
            ``"EPISODE_NOT_FOUND"``; None when the server sent none.
        domain: ErrorInfo's domain (``"swarmrl.dev"`` for the swarm server).
        metadata: ErrorInfo's metadata, e.g. ``{"episode_id": "..."}``.
        field: The offending request field for INVALID_ARGUMENT (from
            google.rpc.BadRequest), as a dotted path like ``"sampling.max_tokens"``.
        retry_delay: Seconds the server asked the client to wait before retrying
            (from google.rpc.RetryInfo), or None.
        details: Every google.rpc detail message the server attached, unpacked.
    """

    default_code: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN
    """The code a subclass stands for; the root uses UNKNOWN when none is given."""

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str | None = None,
        domain: str | None = None,
        metadata: Mapping[str, str] | None = None,
        field: str | None = None,
        retry_delay: float | None = None,
        details: Sequence[Message] = (),
    ) -> None:
        super().__init__(message)
        self.code: grpc.StatusCode = code if code is not None else self.default_code
        self.message = message
        self.reason = reason
        self.domain = domain
        self.metadata: dict[str, str] = dict(metadata or {})
        self.field = field
        self.retry_delay = retry_delay
        self.details: list[Message] = list(details)

    def __str__(self) -> str:
        reason = f" {self.reason}" if self.reason else ""
        return f"{self.code.name}{reason}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, reason={self.reason!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only arguments are not in self.args; rebuild from the attributes so the
        # exception survives pickling (multiprocessing, Ray).
        kwargs = {
            "code": self.code,
            "reason": self.reason,
            "domain": self.domain,
            "metadata": self.metadata,
            "field": self.field,
            "retry_delay": self.retry_delay,
        }
        return (_rebuild, (type(self), self.message, kwargs))


def _rebuild(cls: type[SwarmError], message: str, kwargs: dict[str, Any]) -> SwarmError:
    return cls(message, **kwargs)


class InvalidArgumentError(SwarmError):
    """The request is malformed; `field` names the offending field."""

    default_code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(SwarmError):
    """An episode, model, session or call the request names does not exist."""

    default_code = grpc.StatusCode.NOT_FOUND


class AlreadyExistsError(SwarmError):
    """The thing the request would create already exists."""

    default_code = grpc.StatusCode.ALREADY_EXISTS


class FailedPreconditionError(SwarmError):
    """The request is valid but the state does not allow it (e.g. the episode is ended)."""

    default_code = grpc.StatusCode.FAILED_PRECONDITION


class AbortedError(SwarmError):
    """The operation was aborted, typically by a concurrency conflict."""

    default_code = grpc.StatusCode.ABORTED


class OutOfRangeError(SwarmError):
    """A value is outside its valid range (e.g. the prompt exceeds the context length)."""

    default_code = grpc.StatusCode.OUT_OF_RANGE


class UnauthenticatedError(SwarmError):
    """The API key is missing or not accepted."""

    default_code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDeniedError(SwarmError):
    """The API key's role does not allow this call."""

    default_code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(SwarmError):
    """The server is over capacity or a quota is spent."""

    default_code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnavailableError(SwarmError):
    """The server is unreachable or asked to retry later; the SDK retries these itself."""

    default_code = grpc.StatusCode.UNAVAILABLE


class StreamInterruptedError(UnavailableError):
    """A streaming generation broke after it had started (the server or the connection
    went away). The server records a call only once it has finished, so nothing partial
    was kept: the call can be re-issued. Re-issuing with the same ``request_id`` is
    answered with the recorded call if it did finish; ``chat()`` and
    ``generate_tokens()`` re-issue for you."""

    def __init__(self, message: str, *, request_id: str = "", **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.request_id = request_id


class DeadlineExceededError(SwarmError):
    """The call did not finish within its timeout."""

    default_code = grpc.StatusCode.DEADLINE_EXCEEDED


class CancelledError(SwarmError):
    """The call was cancelled (by the caller, or by the server going away)."""

    default_code = grpc.StatusCode.CANCELLED


class InternalError(SwarmError):
    """The server hit a bug."""

    default_code = grpc.StatusCode.INTERNAL


class UnimplementedError(SwarmError):
    """The server does not implement this call or option."""

    default_code = grpc.StatusCode.UNIMPLEMENTED


class UnknownError(SwarmError):
    """The failure has no better description (or the server raised an unexpected error)."""

    default_code = grpc.StatusCode.UNKNOWN


_BY_CODE: dict[grpc.StatusCode, type[SwarmError]] = {
    cls.default_code: cls
    for cls in (
        InvalidArgumentError,
        NotFoundError,
        AlreadyExistsError,
        FailedPreconditionError,
        AbortedError,
        OutOfRangeError,
        UnauthenticatedError,
        PermissionDeniedError,
        ResourceExhaustedError,
        UnavailableError,
        DeadlineExceededError,
        CancelledError,
        InternalError,
        UnimplementedError,
        UnknownError,
    )
}


def error_class(code: grpc.StatusCode) -> type[SwarmError]:
    """The exception class that stands for `code` (`SwarmError` for codes without one)."""
    return _BY_CODE.get(code, SwarmError)


def from_grpc_error(err: grpc.RpcError) -> SwarmError:
    """Builds the typed exception for a failed gRPC call, with its error details.

    Works for both `grpc.RpcError` (sync stubs) and `grpc.aio.AioRpcError`. The caller
    raises the result ``from err`` so the original traceback stays attached.
    """
    code = err.code()
    message = err.details() or ""
    cls = error_class(code)
    kwargs: dict[str, Any] = {}
    details: list[Message] = []
    try:
        # Both error kinds answer code()/details()/trailing_metadata() synchronously,
        # which is all rpc_status.from_call reads.
        status = rpc_status.from_call(cast(grpc.Call, err))
    except ValueError:  # the rich status disagrees with the plain one; trust the plain one
        status = None
    for any_detail in status.details if status is not None else ():
        if any_detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            any_detail.Unpack(info)
            kwargs.update(reason=info.reason, domain=info.domain, metadata=dict(info.metadata))
            details.append(info)
        elif any_detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            any_detail.Unpack(bad)
            if bad.field_violations:
                kwargs["field"] = bad.field_violations[0].field
            details.append(bad)
        elif any_detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry = error_details_pb2.RetryInfo()
            any_detail.Unpack(retry)
            kwargs["retry_delay"] = retry.retry_delay.ToTimedelta().total_seconds()
            details.append(retry)
        elif any_detail.Is(error_details_pb2.DebugInfo.DESCRIPTOR):
            debug = error_details_pb2.DebugInfo()
            any_detail.Unpack(debug)
            details.append(debug)
    return cls(message, code=code, details=details, **kwargs)
