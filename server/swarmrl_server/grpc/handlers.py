"""The types the server's interceptors and error mapping pass around, named once.

An interceptor sees every service's calls, so its handlers and contexts carry any
service's request and response messages: the `Any` in these aliases is the wire's (each
servicer types its own messages). grpc's classes are not generic at runtime, only in
grpc-stubs, hence the string aliases and the base chosen under TYPE_CHECKING.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TypeAlias, cast

import grpc

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
Continuation: TypeAlias = "Callable[[grpc.HandlerCallDetails], Awaitable[Handler]]"

if TYPE_CHECKING:
    Interceptor: TypeAlias = grpc.aio.ServerInterceptor[Any, Any]
else:
    Interceptor = grpc.aio.ServerInterceptor


class _AbortsWithStatus(Protocol):
    async def abort_with_status(self, status: grpc.Status) -> NoReturn: ...


async def abort_with_status(context: Context, status: grpc.Status) -> NoReturn:
    """Ends the call with `status` (its code, message and rich details): grpc.aio's
    `ServicerContext.abort_with_status`, which grpc-stubs 1.53 leaves out."""
    await cast(_AbortsWithStatus, context).abort_with_status(status)
