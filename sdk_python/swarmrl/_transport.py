"""The gRPC layer: one channel, the four service stubs, and calls made through the retry policy.

Everything here runs on the event loop that first used the client: grpc.aio
channels belong to the loop they were created on, so the channel is made lazily,
inside the first call.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc
import grpc.aio

from swarmrl._config import ClientConfig, TLSConfig
from swarmrl._errors import CancelledError, UnavailableError, from_grpc_error
from swarmrl._retry import Budget, RetryPolicy, call_with_retry
from swarmrl_proto.v1 import admin_service_pb2_grpc as admin_grpc
from swarmrl_proto.v1 import episode_service_pb2_grpc as episode_grpc
from swarmrl_proto.v1 import session_service_pb2_grpc as session_grpc

Req = TypeVar("Req")
Resp = TypeVar("Resp")


@dataclass(frozen=True)
class Stubs:
    """The async stubs of the four services, bound to one channel."""

    sessions: session_grpc.SessionServiceAsyncStub
    episodes: episode_grpc.EpisodeServiceAsyncStub
    admin: admin_grpc.AdminServiceAsyncStub


def channel_options(config: ClientConfig) -> list[tuple[str, Any]]:
    """Channel arguments, each with what it is for."""
    options: list[tuple[str, Any]] = [
        # Ping every keepalive_time so a silently dead connection (NAT timeout, killed
        # server) is noticed, and drop it when a ping is not answered in keepalive_timeout.
        ("grpc.keepalive_time_ms", int(config.keepalive_time * 1000)),
        ("grpc.keepalive_timeout_ms", int(config.keepalive_timeout * 1000)),
        # Keep pinging between episodes too, when no call is in flight.
        ("grpc.keepalive_permit_without_calls", 1),
        # Token-id lists of long contexts exceed gRPC's 4 MiB default.
        ("grpc.max_send_message_length", config.max_message_bytes),
        ("grpc.max_receive_message_length", config.max_message_bytes),
        # Our retry policy (swarmrl._retry) is the only retry layer; gRPC's would stack on it.
        ("grpc.enable_retries", 0),
        # Reconnect to a restarted server within seconds rather than gRPC's default of up
        # to two minutes of backoff.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", int(config.max_reconnect_backoff * 1000)),
    ]
    if isinstance(config.tls, TLSConfig) and config.tls.server_name:
        options.append(("grpc.ssl_target_name_override", config.tls.server_name))
    return options


def _credentials(tls: bool | TLSConfig) -> grpc.ChannelCredentials:
    if isinstance(tls, TLSConfig):
        return grpc.ssl_channel_credentials(
            root_certificates=tls.root_certificates,
            private_key=tls.client_private_key,
            certificate_chain=tls.client_certificate,
        )
    return grpc.ssl_channel_credentials()


class Transport:
    """Owns the channel; makes unary calls and opens streams through the retry policy.

    Not thread-safe: use it from the event loop it was first used on.
    """

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {config.api_key}"),) if config.api_key else ()
        )
        self._channel: grpc.aio.Channel | None = None
        self._stubs: Stubs | None = None
        self._closed = False
        self._streams: weakref.WeakSet[Stream[Any]] = weakref.WeakSet()

    @property
    def policy(self) -> RetryPolicy | None:
        """The retry policy every call goes through."""
        return self.config.retry

    def stubs(self) -> Stubs:
        """The stubs, creating the channel on first use (on the running loop)."""
        if self._closed:
            raise RuntimeError("the swarmrl client is closed")
        if self._stubs is None:
            options = channel_options(self.config)
            if self.config.tls is False:
                channel = grpc.aio.insecure_channel(self.config.target, options=options)
            else:
                creds = _credentials(self.config.tls)
                channel = grpc.aio.secure_channel(self.config.target, creds, options=options)
            self._channel = channel
            self._stubs = Stubs(
                sessions=session_grpc.SessionServiceStub(channel),
                episodes=episode_grpc.EpisodeServiceStub(channel),
                admin=admin_grpc.AdminServiceStub(channel),
            )
        return self._stubs

    async def wait_ready(self, budget: Budget | None) -> None:
        """Waits, within the retry budget, for the channel to connect.

        This is how a restarting server is waited for: the wait is bounded by the retry
        policy's timeout rather than by a call's deadline. Without a budget (retries
        off) it returns at once and the call fails or waits as gRPC decides.
        """
        channel = self._channel
        if budget is None or channel is None:
            return
        if channel.get_state(try_to_connect=True) == grpc.ChannelConnectivity.READY:
            return
        started = time.monotonic()
        try:
            await asyncio.wait_for(channel.channel_ready(), timeout=budget.remaining())
        except asyncio.TimeoutError:
            budget.unhealthy_since(started)
            raise UnavailableError(
                f"server at {self.config.target} unreachable", reason="UNREACHABLE"
            ) from None

    async def unary(
        self,
        method: str,
        pick: Callable[[Stubs], grpc.aio.UnaryUnaryMultiCallable[Req, Resp]],
        request: Req,
        *,
        retryable: bool,
        timeout: float | None = None,
    ) -> Resp:
        """Makes a unary call, retried per the policy when `retryable`.

        Args:
            method: RPC name, for logs.
            pick: Selects the RPC from the stubs.
            request: The request; reused unchanged on every attempt.
            retryable: Whether to retry: the call must be safe to repeat.
            timeout: Per-attempt deadline; the config's call_timeout when None.
        """
        rpc = pick(self.stubs())
        deadline = timeout if timeout is not None else self.config.call_timeout

        async def attempt(budget: Budget | None) -> Resp:
            await self.wait_ready(budget)
            try:
                # When retrying, wait_for_ready queues a call that races a reconnect
                # instead of failing it (the deadline still bounds it). Without retries
                # a call to an unreachable server fails at once.
                return await rpc(
                    request,
                    timeout=deadline,
                    metadata=self.metadata,
                    wait_for_ready=budget is not None,
                )
            except grpc.RpcError as err:
                raise from_grpc_error(err) from err

        return await call_with_retry(
            attempt, policy=self.policy, method=method, retryable=retryable
        )

    async def open_stream(
        self,
        pick: Callable[[Stubs], grpc.aio.UnaryStreamMultiCallable[Req, Resp]],
        request: Req,
        budget: Budget | None,
    ) -> Stream[Resp]:
        """Starts a server-streaming call (no deadline)."""
        rpc = pick(self.stubs())
        await self.wait_ready(budget)
        # Without a deadline, wait_for_ready could wait forever for a server that never
        # returns; failing fast hands the waiting to the (time-bounded) retry policy.
        stream = Stream(rpc(request, metadata=self.metadata, wait_for_ready=False))
        self._streams.add(stream)
        return stream

    async def close(self) -> None:
        """Closes the channel; in-flight calls are cancelled."""
        self._closed = True
        for stream in list(self._streams):
            stream.cancel()
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = None
            self._stubs = None


class Stream(Generic[Resp]):
    """One server-streaming call, read message by message."""

    def __init__(self, call: grpc.aio.UnaryStreamCall[Any, Resp]) -> None:
        self._call = call
        self._messages = call.__aiter__()
        self.cancelled = False  # by this side: `cancel`, or the client closing

    async def next(self) -> Resp | None:
        """The next message, or None at the end of the stream; failures as `SwarmError`."""
        try:
            return await self._messages.__anext__()
        except StopAsyncIteration:
            return None
        except grpc.RpcError as err:
            raise from_grpc_error(err) from err
        except asyncio.CancelledError:
            if not self.cancelled:
                raise  # the reading task itself is being cancelled
            # gRPC reports a call we cancelled as a cancelled *task*; it is not.
            raise CancelledError("the stream was closed") from None

    def cancel(self) -> None:
        """Cancels the call (the server sees CANCELLED); harmless once it has finished."""
        self.cancelled = True
        self._call.cancel()
