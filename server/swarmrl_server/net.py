"""Loopback plumbing shared by the server, its launchers and the tests."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` now (the OS picks it; another process may take it before
    the caller binds, which launchers retry on)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
