"""Server streams: a completion as it is generated, and the server's resumable event log.

Naively retrying a stream replays what was already seen. The two streams here
avoid that in the two ways api-core's StreamingRetry describes:

- `AsyncCompletionStream` retries only before the first message arrives; the
  request carries a request_id, so a retry of a call that had finished is
  answered with its record instead of a second generation.
- `AsyncEventStream` keeps the last sequence number it yielded and rebuilds the
  request from it on every reconnect (``after_sequence``), dropping duplicates.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType

from swarmrl._compat import Self
from swarmrl._convert import chunk_from_proto, completion_from_proto, event_from_proto
from swarmrl._errors import StreamInterruptedError, SwarmError, UnavailableError, UnknownError
from swarmrl._retry import Budget, call_with_retry
from swarmrl._transport import Stream, Transport
from swarmrl._types import Completion, Event, GenerationChunk
from swarmrl_proto.v1 import episode_service_pb2 as episode_pb2
from swarmrl_proto.v1 import session_service_pb2 as session_pb2

__all__ = ["AsyncCompletionStream", "AsyncEventStream"]


@dataclass(frozen=True)
class GenerateCall:
    """What a completion stream is made from (kept out of its public constructor)."""

    transport: Transport
    request: episode_pb2.GenerateRequest


class AsyncCompletionStream:
    """A completion that streams: iterate it for `GenerationChunk`s, then read `completion`.

    .. code-block:: python

        async with ep.stream(messages) as stream:
            async for chunk in stream:
                print(chunk.text, end="")
        completion = stream.completion

    ``await stream.get_final_completion()`` drains what is left and returns the
    completion. Leaving the ``async with`` block early cancels the generation. The
    call starts on the first iteration; an UNAVAILABLE failure before the first
    message (a server restarting, generation paused) is retried with the same
    request_id; a failure after it raises `StreamInterruptedError` (the call can be
    re-issued: only finished calls are recorded).
    """

    def __init__(self, call: GenerateCall) -> None:
        self._transport = call.transport
        self._request = call.request
        self._stream: Stream[episode_pb2.GenerateResponse] | None = None
        self._received_any = False
        self._completion: Completion | None = None
        self._closed = False

    @property
    def transport_policy(self) -> object | None:
        """The client's retry policy (None: retries are off)."""
        return self._transport.policy

    def reissued(self) -> AsyncCompletionStream:
        """A fresh stream for the same request (same request_id), not yet started."""
        return AsyncCompletionStream(GenerateCall(self._transport, self._request))

    @property
    def request_id(self) -> str:
        """The call's idempotency key; a retry with it replays a finished call."""
        return self._request.request_id

    @property
    def completion(self) -> Completion:
        """The final record of the call, once the stream is exhausted.

        Raises:
            RuntimeError: The stream has not been read to its end.
        """
        if self._completion is None:
            raise RuntimeError(
                "the completion is not finished: iterate the stream to its end, "
                "or use `await stream.get_final_completion()`"
            )
        return self._completion

    async def get_final_completion(self) -> Completion:
        """Reads the rest of the stream and returns the completion."""
        async for _ in self:
            pass
        return self.completion

    def __aiter__(self) -> AsyncCompletionStream:
        return self

    async def __anext__(self) -> GenerationChunk:
        if self._completion is not None or self._closed:
            raise StopAsyncIteration
        message = await self._next_message()
        kind = message.WhichOneof("event")
        if kind == "chunk":
            return chunk_from_proto(message.chunk)
        if kind == "result":
            self._completion = completion_from_proto(message.result)
            self._stream = None
            raise StopAsyncIteration
        raise UnknownError(f"Generate sent a message of unknown kind {kind!r}")

    async def _next_message(self) -> episode_pb2.GenerateResponse:
        if not self._received_any:
            message = await call_with_retry(
                self._open_and_read_first,
                policy=self._transport.policy,
                method="Generate",
                retryable=True,
            )
            self._received_any = True
        else:
            assert self._stream is not None
            try:
                message = await self._stream.next()
            except UnavailableError as err:
                # Chunks were already yielded, so a silent retry would repeat them; the
                # caller decides (nothing partial was recorded on the server).
                raise StreamInterruptedError(
                    f"the Generate stream broke after it started ({err.message}); the call "
                    f"can be re-issued (request_id {self.request_id!r} replays it if it "
                    "finished)", request_id=self.request_id, reason=err.reason,
                ) from err
        if message is None:
            raise UnknownError("the Generate stream ended without a result")
        return message

    async def _open_and_read_first(
        self, budget: Budget | None
    ) -> episode_pb2.GenerateResponse | None:
        if self._stream is not None:
            self._stream.cancel()
        self._stream = await self._transport.open_stream(
            lambda s: s.episodes.Generate, self._request, budget
        )
        return await self._stream.next()

    async def aclose(self) -> None:
        """Stops reading; a generation still running is cancelled."""
        self._closed = True
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class AsyncEventStream:
    """The server's events, in order, surviving disconnects and server restarts.

    .. code-block:: python

        async for event in client.events():
            if isinstance(event, swarmrl.PolicyVersionChanged):
                ...

    On UNAVAILABLE the stream reconnects (with the client's retry policy, whose
    clock restarts after every event received) and asks for the events after the
    last one it yielded, so none is seen twice. `last_sequence` (the sequence number of
    the last event received, or the starting point) can seed a later
    ``client.events(after_sequence=...)``. Iteration ends if the server closes the
    stream cleanly.
    """

    def __init__(self, transport: Transport, after_sequence: int) -> None:
        self._transport = transport
        self._stream: Stream[session_pb2.WatchEventsResponse] | None = None
        self._closed = False
        self.last_sequence = after_sequence

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> Event:
        while not self._closed:
            message = await call_with_retry(
                self._read, policy=self._transport.policy, method="WatchEvents", retryable=True
            )
            if message is None:
                break
            if message.sequence <= self.last_sequence:
                continue  # already seen before a reconnect
            self.last_sequence = message.sequence
            event = event_from_proto(message)
            if event is not None:  # kinds newer than this SDK are skipped
                return event
        self._stream = None
        raise StopAsyncIteration

    async def _read(self, budget: Budget | None) -> session_pb2.WatchEventsResponse | None:
        if self._stream is None:
            request = session_pb2.WatchEventsRequest(after_sequence=self.last_sequence)
            self._stream = await self._transport.open_stream(
                lambda s: s.sessions.WatchEvents, request, budget
            )
        stream = self._stream
        try:
            return await stream.next()
        except SwarmError:
            self._stream = None  # the next attempt reopens from last_sequence
            if stream.cancelled:  # closed by us (aclose, or the client closing): the end
                return None
            raise

    async def aclose(self) -> None:
        """Stops watching."""
        self._closed = True
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
