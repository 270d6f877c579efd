"""API keys with roles, checked on every RPC when the server has keys configured.

Keys travel as `authorization: Bearer <key>` metadata. An admin key may call
everything; a client key everything but the admin service's mutating calls.
Health checks and reflection stay open so probes and tools work without a key.
Keys are compared as SHA-256 digests with `hmac.compare_digest`, so neither the
comparison time nor a memory dump reveals them.

Each key also names a principal, the owner of what it opens (see `identity`): a key
given as `NAME=KEY` binds principal NAME (several keys may share one, e.g. while
rotating them); a bare KEY is its own principal, named by a digest of it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc

from swarmrl_server.identity import ANONYMOUS, Principal

OPEN_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")
ADMIN_ONLY = (
    "/swarmrl.v1.AdminService/PauseGeneration",
    "/swarmrl.v1.AdminService/ResumeGeneration",
    "/swarmrl.v1.AdminService/SaveCheckpoint",
    "/swarmrl.v1.AdminService/ListClients",  # names every client's sessions
    "/swarmrl.v1.AdminService/GetLiveSnapshot",  # names open episodes and their tasks
)


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _principal_and_key(spec: str) -> tuple[str, str]:
    """`NAME=KEY` → (NAME, KEY); a bare KEY → (key-<digest>, KEY). Only an identifier-like
    NAME counts, so base64 padding (`...==`) in a bare key is not taken for a binding."""
    name, sep, key = spec.partition("=")
    if sep and key and name and all(ch.isalnum() or ch in "-_.@" for ch in name):
        return name, key
    return "key-" + hashlib.sha256(spec.encode()).hexdigest()[:16], spec


class KeyRing:
    """The configured keys and the role each grants."""

    def __init__(self, admin_keys: Iterable[str] = (), client_keys: Iterable[str] = ()) -> None:
        self._admin = [(_digest(k), n) for n, k in map(_principal_and_key, admin_keys)]
        self._client = [(_digest(k), n) for n, k in map(_principal_and_key, client_keys)]

    @property
    def enabled(self) -> bool:
        return bool(self._admin or self._client)

    def identify(self, key: str) -> Principal | None:
        """The principal `key` stands for; None for an unknown key on a keyed server.
        A server with no keys has one anonymous principal for every caller."""
        if not self.enabled:
            return ANONYMOUS
        d = _digest(key)
        for digest, name in self._admin:
            if hmac.compare_digest(d, digest):
                return Principal(name, admin=True)
        for digest, name in self._client:
            if hmac.compare_digest(d, digest):
                return Principal(name)
        return None

    def role(self, key: str) -> str | None:
        principal = self.identify(key) if self.enabled else None
        if principal is None:
            return None
        return "admin" if principal.admin else "client"

    def caller(self, metadata: Iterable[tuple[str, Any]] | None) -> Principal:
        """The principal of an RPC that passed `AuthInterceptor` (so its key is known)."""
        return self.identify(bearer(metadata)) or ANONYMOUS


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
