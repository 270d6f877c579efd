"""The gRPC server: servicers, health, reflection, keepalive, auth, graceful stop."""

from __future__ import annotations

from typing import Any, Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from swarmrl_proto.v1 import (
    admin_service_pb2,
    admin_service_pb2_grpc,
    episode_service_pb2,
    episode_service_pb2_grpc,
    session_service_pb2,
    session_service_pb2_grpc,
)
from swarmrl_server.grpc.auth import AuthInterceptor
from swarmrl_server.grpc.decode import DecodeInterceptor
from swarmrl_server.grpc.handlers import Interceptor
from swarmrl_server.grpc.observe import ObserveInterceptor
from swarmrl_server.grpc.servicers import AdminServicer, EpisodeServicer, SessionServicer
from swarmrl_server.security import KeyRing
from swarmrl_server.swarm import Swarm

SERVICES = (
    session_service_pb2.DESCRIPTOR.services_by_name["SessionService"].full_name,
    episode_service_pb2.DESCRIPTOR.services_by_name["EpisodeService"].full_name,
    admin_service_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024

SERVER_OPTIONS: list[tuple[str, Any]] = [
    # Ping idle clients every 30 s and drop them after 15 s of silence, so dead
    # connections are noticed while their sessions' leases are still running.
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 15_000),
    # Let clients ping as often as every 10 s, even without calls in flight.
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # Long prompts as token ids are big; anything larger is RESOURCE_EXHAUSTED.
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # A restarted server must be able to take its port back at once.
    ("grpc.so_reuseport", 0),
]


class HealthStatus(Protocol):
    """What the server does with grpc_health's asyncio servicer: sets a service's status."""

    async def set(self, service: str,
                  status: health_pb2.HealthCheckResponse.ServingStatus.ValueType) -> None: ...


def _health_servicer() -> Any:
    """grpc_health's asyncio servicer (`health.aio.HealthServicer`), which its stubs leave
    out: Any at that boundary (registered on the server, then used as a `HealthStatus`)."""
    return vars(health)["aio"].HealthServicer()


class SwarmGrpcServer:
    """A started gRPC server bound to one address."""

    def __init__(self, server: grpc.aio.Server, port: int, health_servicer: HealthStatus) -> None:
        self.server = server
        self.port = port
        self._health = health_servicer

    async def stop(self, grace_s: float = 5.0) -> None:
        """Refuses new calls, gives calls in flight `grace_s` to finish, then cancels them."""
        for name in (*SERVICES, ""):
            await self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        await self.server.stop(grace_s)


async def create_server(
    swarm: Swarm,
    address: str = "127.0.0.1:0",
    *,
    keys: KeyRing | None = None,
    tls: grpc.ServerCredentials | None = None,
) -> SwarmGrpcServer:
    """Builds and starts the server on `address` ("host:0" picks a free port)."""
    # Outermost first: the request context and its metrics see refused calls too.
    interceptors: list[Interceptor] = [ObserveInterceptor(swarm.telemetry)]
    if keys is not None and keys.enabled:
        interceptors.append(AuthInterceptor(keys))
    # Innermost: undecodable requests are INVALID_ARGUMENT naming the field, not UNKNOWN.
    interceptors.append(DecodeInterceptor())
    server = grpc.aio.server(options=SERVER_OPTIONS, interceptors=interceptors)
    session_service_pb2_grpc.add_SessionServiceServicer_to_server(
        SessionServicer(swarm, keys), server)
    episode_service_pb2_grpc.add_EpisodeServiceServicer_to_server(
        EpisodeServicer(swarm, keys), server)
    admin_service_pb2_grpc.add_AdminServiceServicer_to_server(AdminServicer(swarm), server)
    health_servicer = _health_servicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*SERVICES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
         reflection.SERVICE_NAME),
        server,
    )
    port = server.add_secure_port(address, tls) if tls else server.add_insecure_port(address)
    if port == 0:
        raise OSError(f"could not bind {address}")
    await server.start()
    for name in (*SERVICES, ""):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return SwarmGrpcServer(server, port, health_servicer)
