"""The one error type domain code raises; the gRPC and HTTP layers translate it.

Domain objects never import grpc or fastapi, and neither does this module. They raise
`SwarmError` with a `Code` (the canonical status codes, transport-neutral), a stable
UPPER_SNAKE reason (sent as google.rpc.ErrorInfo) and, for bad input, the name of the
offending field (sent as google.rpc.BadRequest). Each door maps the code in one table:
`grpc/errors.py` to a gRPC status, `http/errors.py` to an HTTP status.
"""

from __future__ import annotations

import enum

DOMAIN = "swarmrl.dev"


class Code(enum.Enum):
    """The canonical status codes the domain uses (google.rpc.Code's names)."""

    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    OUT_OF_RANGE = "OUT_OF_RANGE"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    PERMISSION_DENIED = "PERMISSION_DENIED"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"
    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    INTERNAL = "INTERNAL"


class Reason(str, enum.Enum):
    """Stable machine-readable reasons, sent as ErrorInfo.reason."""

    INVALID_FIELD = "INVALID_FIELD"
    MODEL_NOT_FOUND = "MODEL_NOT_FOUND"
    EPISODE_NOT_FOUND = "EPISODE_NOT_FOUND"
    SESSION_NOT_FOUND = "SESSION_NOT_FOUND"
    CALL_NOT_FOUND = "CALL_NOT_FOUND"
    GROUP_NOT_FOUND = "GROUP_NOT_FOUND"
    CHECKPOINT_NOT_FOUND = "CHECKPOINT_NOT_FOUND"
    CHECKPOINT_NEWEST = "CHECKPOINT_NEWEST"
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
        code: Code,
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
    return SwarmError(Code.INVALID_ARGUMENT, Reason.INVALID_FIELD, f"{field}: {message}", field=field)


def not_found(reason: Reason, what: str, ident: str) -> SwarmError:
    """NOT_FOUND for an unknown `what` called `ident`."""
    return SwarmError(Code.NOT_FOUND, reason, f"unknown {what} {ident!r}", metadata={what: ident})


def precondition(reason: Reason, message: str) -> SwarmError:
    """FAILED_PRECONDITION: the request is valid but the state does not allow it."""
    return SwarmError(Code.FAILED_PRECONDITION, reason, message)


def unavailable(reason: Reason, message: str, retry_after_s: float = 1.0) -> SwarmError:
    """UNAVAILABLE with a retry hint: try again later, nothing was changed."""
    return SwarmError(Code.UNAVAILABLE, reason, message, retry_after_s=retry_after_s)


def internal(message: str) -> SwarmError:
    """INTERNAL: a server fault, reported without its traceback."""
    return SwarmError(Code.INTERNAL, Reason.INTERNAL, message)
