"""API keys with roles, checked on every RPC when the server has keys configured.

Keys travel as `authorization: Bearer <key>` metadata. An admin key may call
everything; a client key everything but the admin service's mutating calls.
Health checks and reflection stay open so probes and tools work without a key.
Keys are compared as SHA-256 digests with `hmac.compare_digest`, so neither the
comparison time nor a memory dump reveals them.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc

OPEN_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")
ADMIN_ONLY = (
    "/swarmrl.v1.AdminService/PauseGeneration",
    "/swarmrl.v1.AdminService/ResumeGeneration",
    "/swarmrl.v1.AdminService/SaveCheckpoint",
)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class KeyRing:
    """The configured keys and the role each grants."""

    def __init__(self, admin_keys: Iterable[str] = (), client_keys: Iterable[str] = ()) -> None:
        self._admin = [_digest(k) for k in admin_keys]
        self._client = [_digest(k) for k in client_keys]

    @property
    def enabled(self) -> bool:
        return bool(self._admin or self._client)

    def role(self, key: str) -> str | None:
        d = _digest(key)
        if any(hmac.compare_digest(d, k) for k in self._admin):
            return "admin"
        if any(hmac.compare_digest(d, k) for k in self._client):
            return "client"
        return None


def bearer(metadata: Iterable[tuple[str, Any]] | None) -> str:
    for k, v in metadata or ():
        if k == "authorization" and isinstance(v, str) and v.startswith("Bearer "):
            return v[len("Bearer "):]
    return ""


class AuthInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, keys: KeyRing) -> None:
        self._keys = keys

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method = details.method
        if method.startswith(OPEN_PREFIXES):
            return await continuation(details)
        role = self._keys.role(bearer(details.invocation_metadata))
        if role is None:
            return _deny(grpc.StatusCode.UNAUTHENTICATED, "missing or unknown API key")
        if method in ADMIN_ONLY and role != "admin":
            return _deny(grpc.StatusCode.PERMISSION_DENIED, f"{method} needs an admin key")
        return await continuation(details)


def _deny(code: grpc.StatusCode, message: str) -> grpc.RpcMethodHandler:
    async def abort(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(code, message)

    return grpc.unary_unary_rpc_method_handler(abort)
