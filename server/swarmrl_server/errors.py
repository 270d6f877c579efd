"""The one error type domain code raises; the gRPC and HTTP layers translate it.

Domain objects never import grpc or fastapi. They raise `SwarmError` with a
canonical status code, a stable UPPER_SNAKE reason (sent as google.rpc.ErrorInfo)
and, for bad input, the name of the offending field (sent as
google.rpc.BadRequest). The gRPC servicers abort with it; the OpenAI shim maps
the same code to an HTTP status.
"""

from __future__ import annotations

import enum

import grpc

DOMAIN = "swarmrl.dev"


class Reason(str, enum.Enum):
    """Stable machine-readable reasons, sent as ErrorInfo.reason."""

    INVALID_FIELD = "INVALID_FIELD"
    MODEL_NOT_FOUND = "MODEL_NOT_FOUND"
    EPISODE_NOT_FOUND = "EPISODE_NOT_FOUND"
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    CALL_NOT_FOUND = "CALL_NOT_FOUND"
    EPISODE_NOT_OPEN = "EPISODE_NOT_OPEN"
    REWARD_MISSING = "REWARD_MISSING"
    NOT_TRAINABLE = "NOT_TRAINABLE"
    REQUEST_ID_REUSED = "REQUEST_ID_REUSED"
    GENERATION_PAUSED = "GENERATION_PAUSED"
    OVER_CAPACITY = "OVER_CAPACITY"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    REPLICA_UNAVAILABLE = "REPLICA_UNAVAILABLE"
    INTERNAL = "INTERNAL"


class SwarmError(Exception):
    """A failure to report to the caller with a canonical status."""

    def __init__(
        self,
        code: grpc.StatusCode,
        reason: Reason,
        message: str,
        *,
        field: str | None = None,
        retry_after_s: float | None = None,
        metadata: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.field = field
        self.retry_after_s = retry_after_s
        self.metadata = dict(metadata or {})

    def __repr__(self) -> str:
        return f"SwarmError({self.code.name}, {self.reason.value}, {self.message!r})"


def invalid(field: str, message: str) -> SwarmError:
    """INVALID_ARGUMENT naming `field` (a dotted path in the request)."""
    return SwarmError(
        grpc.StatusCode.INVALID_ARGUMENT, Reason.INVALID_FIELD, f"{field}: {message}", field=field
    )


def not_found(reason: Reason, what: str, ident: str) -> SwarmError:
    """NOT_FOUND for an unknown `what` called `ident`."""
    return SwarmError(
        grpc.StatusCode.NOT_FOUND, reason, f"unknown {what} {ident!r}", metadata={what: ident}
    )


def precondition(reason: Reason, message: str) -> SwarmError:
    """FAILED_PRECONDITION: the request is valid but the state does not allow it."""
    return SwarmError(grpc.StatusCode.FAILED_PRECONDITION, reason, message)


def unavailable(reason: Reason, message: str, retry_after_s: float = 1.0) -> SwarmError:
    """UNAVAILABLE with a retry hint: try again later, nothing was changed."""
    return SwarmError(
        grpc.StatusCode.UNAVAILABLE, reason, message, retry_after_s=retry_after_s
    )
