"""RPC plumbing of the fake server in `swarmrl.testing`: rich errors, handler wrappers,
injected faults. Private; kept apart so the fake's services read on their own."""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc
import grpc.aio
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2

from swarmrl_proto.v1 import session_service_pb2 as spb

_Ctx = grpc.aio.ServicerContext[Any, Any]
_C = grpc.StatusCode
_Req = TypeVar("_Req", bound=Message)
_Resp = TypeVar("_Resp", bound=Message)


class _Server(Protocol):
    """What the wrappers need of the fake server."""

    def _enter(self, method: str, request: Message, context: _Ctx) -> None: ...

    def _maybe_fail(self, method: str, sent: int) -> None: ...


_S = TypeVar("_S", bound=_Server)


class _Abort(Exception):
    """A failure to send as a google.rpc.Status with ErrorInfo (+ BadRequest, RetryInfo)."""

    def __init__(self, code: grpc.StatusCode, reason: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code, self.reason, self.extra = code, reason, extra

    async def send(self, context: _Ctx) -> None:
        message, field_name = str(self), self.extra.get("field")
        details: list[Message] = [
            error_details_pb2.ErrorInfo(
                reason=self.reason, domain="swarmrl.dev", metadata=self.extra.get("metadata", {})
            )
        ]
        if field_name:
            message = f"{field_name}: {message}"
            violation = error_details_pb2.BadRequest.FieldViolation(
                field=field_name, description=message
            )
            details.append(error_details_pb2.BadRequest(field_violations=[violation]))
        if self.extra.get("retry_delay") is not None:
            info = error_details_pb2.RetryInfo()
            info.retry_delay.FromNanoseconds(int(self.extra["retry_delay"] * 1e9))
            details.append(info)
        packed = [any_pb2.Any() for _ in details]
        for any_detail, detail in zip(packed, details):
            any_detail.Pack(detail)
        status = status_pb2.Status(code=self.code.value[0], message=message, details=packed)
        trailer = (("grpc-status-details-bin", status.SerializeToString()),)
        await context.abort(self.code, message, trailing_metadata=trailer)


def _invalid(field_name: str, message: str) -> _Abort:
    return _Abort(_C.INVALID_ARGUMENT, "INVALID_FIELD", message, field=field_name)


def _rewards_on(episode: Any, rewards: Mapping[str, float], field_name: str) -> None:
    """Per-model rewards onto an `Episode` record, refused (naming the field) for a model
    the episode does not list or a reward that is not finite, as the real server does."""
    for model, value in rewards.items():
        name = field_name if field_name == "model" else f"{field_name}[{model!r}]"
        if model not in episode.models:
            raise _invalid(name, f"{model!r} is not among the episode's models")
        if not math.isfinite(value):
            raise _invalid(name, "must be finite")
    episode.model_rewards.update(rewards)


def _unary(
    handler: Callable[[_S, _Req, _Ctx], Awaitable[_Resp]],
) -> Callable[[_S, _Req, _Ctx], Coroutine[Any, Any, _Resp]]:
    """Wraps a unary handler: bookkeeping, auth and injected faults first; _Abort sent."""

    @functools.wraps(handler)
    async def wrapped(self: _S, request: _Req, context: _Ctx) -> _Resp:
        try:
            self._enter(handler.__name__, request, context)
            response = await handler(self, request, context)
            self._maybe_fail(handler.__name__, sent=1)  # done, but the answer is lost
            return response
        except _Abort as err:
            await err.send(context)
            raise  # unreachable: abort raises

    return wrapped


def _streaming(
    handler: Callable[[_S, _Req, _Ctx], AsyncIterator[_Resp]],
) -> Callable[[_S, _Req, _Ctx], AsyncIterator[_Resp]]:
    """Like `_unary` for server streams; faults may also strike after some messages."""

    @functools.wraps(handler)
    async def wrapped(self: _S, request: _Req, context: _Ctx) -> AsyncIterator[_Resp]:
        try:
            self._enter(handler.__name__, request, context)
            sent = 0
            async for message in handler(self, request, context):
                yield message
                sent += 1
                self._maybe_fail(handler.__name__, sent)
        except _Abort as err:
            await err.send(context)

    return wrapped


@dataclass
class _Fault:
    code: grpc.StatusCode
    times: int
    after_messages: int
    reason: str
    retry_delay: float | None


_M = TypeVar("_M", bound=Message)


class _Answers:
    """The first answer to each (method, request_id): the protos' idempotency rule."""

    def __init__(self) -> None:
        self._answers: dict[tuple[str, str], Message] = {}

    def replay(self, method: str, request_id: str, kind: type[_M]) -> _M | None:
        """The answer given before to this request_id, if any."""
        answer = self._answers.get((method, request_id)) if request_id else None
        return answer if isinstance(answer, kind) else None

    def remember(self, method: str, request_id: str, response: _M) -> _M:
        if request_id:
            self._answers[(method, request_id)] = response
        return response


class _EventLog:
    """WatchEvents' log: sequence n at index n - 1; published from any thread."""

    def __init__(self) -> None:
        self.events: list[spb.WatchEventsResponse] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        """The serving loop, which watchers wait on (set when the server starts)."""
        self._new_event = asyncio.Event()

    @property
    def last_sequence(self) -> int:
        return len(self.events)

    def publish(self, event: spb.WatchEventsResponse) -> None:
        event.sequence = len(self.events) + 1
        self.events.append(event)
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._wake_watchers)

    def _wake_watchers(self) -> None:
        self._new_event.set()
        self._new_event = asyncio.Event()

    async def after(self, sequence: int) -> AsyncIterator[spb.WatchEventsResponse]:
        """Every event after `sequence`, then each new one as it is published (forever)."""
        while True:
            wake = self._new_event  # taken before the scan, so no event slips between
            for event in self.events[sequence:]:
                yield event
                sequence = event.sequence
            await wake.wait()
