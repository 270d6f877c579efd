"""Client configuration: frozen dataclasses, one docstring per field."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from swarmrl._retry import RetryPolicy

__all__ = ["DEFAULT_TARGET", "ClientConfig", "TLSConfig"]

DEFAULT_TARGET = "127.0.0.1:50051"


@dataclass(frozen=True)
class TLSConfig:
    """TLS settings for the channel. ``ClientConfig(tls=True)`` uses the system's roots."""

    root_certificates: bytes | None = None
    """PEM-encoded root certificates to trust; None uses the system's default roots."""
    client_certificate: bytes | None = None
    """PEM-encoded client certificate chain, for mutual TLS."""
    client_private_key: bytes | None = None
    """PEM-encoded private key of the client certificate, for mutual TLS."""
    server_name: str | None = None
    """Name to expect in the server's certificate when it differs from the target's host."""

    def __post_init__(self) -> None:
        if (self.client_certificate is None) != (self.client_private_key is None):
            raise ValueError("TLSConfig: give both client_certificate and client_private_key")


def _default_client_name() -> str:
    return f"{os.getpid()}@{socket.gethostname()}"


@dataclass(frozen=True)
class ClientConfig:
    """How a client reaches and talks to a swarm server.

    .. code-block:: python

        config = ClientConfig(target="gpu-box:50051", api_key=os.environ["SWARMRL_API_KEY"])
        async with AsyncSwarmClient(config=config) as client:
            ...
    """

    target: str = DEFAULT_TARGET
    """Address of the server's gRPC port, as ``host:port``."""
    api_key: str | None = None
    """API key, sent on every call as ``authorization: Bearer <key>``; None sends none."""
    tls: bool | TLSConfig = False
    """False for plaintext (fine on loopback), True for TLS with the system's roots, or a
    `TLSConfig`."""
    client_name: str = field(default_factory=_default_client_name)
    """Name of this client, shown in the server's status and logs. Default ``pid@hostname``."""
    agent_version: str = ""
    """Version of this client's agent code: the agent version of its episodes that do not
    give their own, so a client replaced by an edited one shows up in the server's metrics
    and in `list_clients` under its new version."""
    session_lease: float = 30.0
    """Requested session lease in seconds; the server clamps it. A background task renews
    it every third of the granted lease. When a lease lapses the server aborts the
    session's open episodes."""
    retry: RetryPolicy | None = field(default_factory=RetryPolicy)
    """How calls that fail with UNAVAILABLE, or find the server unreachable, are retried
    and how long a restarting server is waited for. None turns retries off: a call to an
    unreachable server then fails at once."""
    call_timeout: float | None = 60.0
    """Deadline of one attempt of a unary call, in seconds; None for none. Streams
    (`AsyncEpisode.stream`, `AsyncSwarmClient.events`) have no deadline."""
    training_call_timeout: float = 3600.0
    """Deadline of the unary calls that wait for the trainer, in seconds: holding training
    (a step in progress lands first) and saving or restoring a checkpoint. A step of a
    small model on a CPU, or a large model's checkpoint, outlasts `call_timeout`; a dead
    server is still noticed at once (UNAVAILABLE, keepalive)."""
    keepalive_time: float = 30.0
    """Seconds between keepalive pings, so a dead connection is noticed even when idle."""
    keepalive_timeout: float = 15.0
    """Seconds to wait for a keepalive ping's answer before the connection is dropped."""
    max_reconnect_backoff: float = 2.0
    """Longest pause, in seconds, between the channel's attempts to reconnect to a server
    that went away; small so that a restarted server is found quickly."""
    max_message_bytes: int = 64 * 1024 * 1024
    """Largest message sent or received (long token-id lists need more than gRPC's 4 MiB)."""

    def __post_init__(self) -> None:
        if not self.target:
            raise ValueError("ClientConfig.target must not be empty")
        for name in ("session_lease", "keepalive_time", "keepalive_timeout",
                     "training_call_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ClientConfig.{name} must be positive")
        if self.call_timeout is not None and self.call_timeout <= 0:
            raise ValueError("ClientConfig.call_timeout must be positive or None")
        if self.max_reconnect_backoff <= 0 or self.max_message_bytes <= 0:
            raise ValueError("ClientConfig: max_reconnect_backoff and max_message_bytes > 0")
