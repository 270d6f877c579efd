"""The gRPC door's adapter of `security`: API keys checked on every RPC when the server
has keys configured.

Keys travel as `authorization: Bearer <key>` metadata and are resolved by
`security.KeyRing`. An admin key may call everything; a client key everything but
ADMIN_ONLY. Health checks and reflection stay open so probes and tools work without a key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import grpc

from swarmrl_server.grpc.handlers import Context, Continuation, Handler, Interceptor
from swarmrl_server.security import ANONYMOUS, KeyRing, Principal, bearer_token

OPEN_PREFIXES = ("/grpc.health.v1.", "/grpc.reflection.")
ADMIN_ONLY = (
    "/swarmrl.v1.AdminService/PauseGeneration",
    "/swarmrl.v1.AdminService/ResumeGeneration",
    "/swarmrl.v1.AdminService/SaveCheckpoint",
    "/swarmrl.v1.AdminService/DeleteCheckpoint",  # removes files: admin only
    "/swarmrl.v1.AdminService/HoldTraining",
    "/swarmrl.v1.AdminService/ReleaseTraining",
    "/swarmrl.v1.AdminService/RestoreCheckpoint",  # loads weights: admin only
    "/swarmrl.v1.AdminService/ListClients",  # names every client's sessions
    "/swarmrl.v1.AdminService/GetLiveSnapshot",  # names open episodes and their tasks
)


def principal_of(keys: KeyRing, metadata: Iterable[tuple[str, Any]] | None) -> Principal:
    """The principal of an RPC that passed `AuthInterceptor` (so its key is known)."""
    return keys.identify(bearer(metadata)) or ANONYMOUS


def bearer(metadata: Iterable[tuple[str, Any]] | None) -> str:
    """The bearer token of a call's `authorization` metadata, or ""."""
    for k, v in metadata or ():
        if k == "authorization" and isinstance(v, str):
            return bearer_token(v)
    return ""


class AuthInterceptor(Interceptor):
    def __init__(self, keys: KeyRing) -> None:
        self._keys = keys

    async def intercept_service(
        self,
        continuation: Continuation,
        details: grpc.HandlerCallDetails,
    ) -> Handler:
        method = details.method
        if method.startswith(OPEN_PREFIXES):
            return await continuation(details)
        role = self._keys.role(bearer(details.invocation_metadata))
        if role is None:
            return _deny(grpc.StatusCode.UNAUTHENTICATED, "missing or unknown API key")
        if method in ADMIN_ONLY and role != "admin":
            return _deny(grpc.StatusCode.PERMISSION_DENIED, f"{method} needs an admin key")
        return await continuation(details)


def _deny(code: grpc.StatusCode, message: str) -> Handler:
    async def abort(request: Any, context: Context) -> Any:
        await context.abort(code, message)

    return grpc.unary_unary_rpc_method_handler(abort)
