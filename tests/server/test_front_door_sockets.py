"""Both front doors answer keep-alive calls without Nagle's ~40 ms stall.

A response written in pieces (uvicorn sends the head, then the body) meets Nagle's
algorithm on the server and delayed ACKs on a keep-alive client: each call after a
connection's first waited ~40 ms. What prevents it is TCP_NODELAY on every socket the
server accepted, which these tests read back from the server process's own sockets
(latency itself is measured by benchmarks/gateway_load.py).
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import grpc
import httpx

from swarmrl_proto.v1 import admin_service_pb2 as admin_pb
from swarmrl_proto.v1 import admin_service_pb2_grpc as admin_grpc


def accepted_sockets(port: int) -> list[socket.socket]:
    """This process's connected TCP sockets whose local port is `port` (server side)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            fd = int(name)
            sock = socket.socket(fileno=os.dup(fd))
        except OSError:
            continue
        try:
            if sock.type == socket.SOCK_STREAM and sock.family in (socket.AF_INET, socket.AF_INET6) \
                    and sock.getsockname()[1] == port:
                sock.getpeername()  # raises for the listening socket
                found.append(sock)
                continue
        except OSError:
            pass
        sock.close()
    return found


def nodelay(sock: socket.socket) -> bool:
    return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


async def test_http_connections_have_nagle_off(http_server: Any) -> None:
    port = http_server.http.port
    async with httpx.AsyncClient(base_url=http_server.http.base_url) as client:
        for _ in range(2):  # one keep-alive connection, reused
            assert (await client.get("/health")).status_code == 200
        sockets = accepted_sockets(port)
        try:
            assert sockets, "the server's side of the connection was not found"
            assert all(nodelay(s) for s in sockets)
        finally:
            for s in sockets:
                s.close()


async def test_grpc_connections_have_nagle_off(server: Any) -> None:
    async with grpc.aio.insecure_channel(server.grpc_target) as channel:
        stub = admin_grpc.AdminServiceStub(channel)
        await stub.GetStatus(admin_pb.GetStatusRequest())
        await asyncio.sleep(0)
        sockets = accepted_sockets(server.grpc.port)
        try:
            assert sockets, "the server's side of the connection was not found"
            assert all(nodelay(s) for s in sockets)
        finally:
            for s in sockets:
                s.close()
