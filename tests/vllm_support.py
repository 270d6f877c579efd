"""Holding a `VLLMEngine` call at a known token, for the tests that time an event (a weight
sync, an adapter load) against a call in flight, so that the event surely happens.

`await hold_calls(server, tokens=k)` gives a `VLLMServer` (an engine's `servers[i]`) a new
HTTP client whose transport passes everything through unchanged, except the first
/v1/completions stream opened after it: that one stops passing bytes after the chunk
that brings its tokens to `k` or more (`Hold.passed`; vLLM streams a token a chunk), until
`Hold.release()`. `Hold.wait_held()` waits for the hold (and fails if the call ended
first). The engine's own reader is not touched: it sees a server that paused between two
chunks. So while held the call is in flight exactly as the engine sees one (its reader
task runs: a sync's drain waits for it, a sync can interrupt it), and its caller has seen
`passed` tokens, no more:
  - a sync that interrupts it cancels the read: the stream closes while held ("closed
    while held") and the call carries on from exactly `passed` tokens;
  - a sync that waits for it waits until the test releases it ("released", then "ended"
    when the stream has been read to its end).
vLLM itself is not held (it keeps no back-pressure): it may finish generating the call
meanwhile, its tokens then waiting in the stream. What is held is the engine's call.

The transport also logs, with `time.perf_counter()`, every request it sends ("POST
/pause", ...) and those moments of the held stream; a test adds its own marks (`Hold.log`)
and asserts their order (`Hold.assert_order`) and intervals (`Hold.at`).
No engine code is changed for this: an httpx transport is the seam.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import httpx

from swarmrl_server.engine.vllm.server import VLLMServer

COMPLETIONS = "/v1/completions"


class Hold:
    """One held completion stream and the log of what the server was asked meanwhile."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        """Hold once at least this many tokens have passed."""
        self.passed = 0
        """Tokens passed before the hold (>= `tokens` once held)."""
        self.opened = asyncio.Event()
        """Set when the stream's response began (its headers arrived: the server took the
        call)."""
        self.held = asyncio.Event()
        """Set when the stream stops passing bytes."""
        self._release = asyncio.Event()
        self._claimed = False
        self._over = asyncio.Event()
        """Set when the held stream ended or closed."""
        self.events: list[tuple[float, str]] = []

    def release(self) -> None:
        """Lets the held stream go on (or not stop at all); logged as "released" unless the
        stream has already closed."""
        if not self._release.is_set():
            self._release.set()
            if not self._over.is_set():
                self.log("released")

    async def wait_held(self, timeout_s: float = 120.0) -> None:
        """Until the stream is held; fails if it ended first (a call of fewer tokens)."""
        async with asyncio.timeout(timeout_s):
            held = asyncio.ensure_future(self.held.wait())
            over = asyncio.ensure_future(self._over.wait())
            await asyncio.wait({held, over}, return_when=asyncio.FIRST_COMPLETED)
            held.cancel()
            over.cancel()
        assert self.held.is_set(), f"the call ended after {self.passed} tokens, unheld"

    def log(self, what: str) -> None:
        self.events.append((time.perf_counter(), what))

    def names(self) -> list[str]:
        return [what for _, what in self.events]

    def at(self, what: str) -> float:
        """When `what` was first logged."""
        times = [t for t, name in self.events if name == what]
        assert times, f"{what!r} never happened: {self.names()}"
        return times[0]

    def assert_order(self, *names: str) -> None:
        """Each of `names` happened, first occurrences in this order."""
        times = [self.at(n) for n in names]
        assert times == sorted(times), f"not in the order {names}: {self.names()}"

    async def _stream(self, inner: httpx.AsyncByteStream) -> AsyncIterator[bytes]:
        """`inner`'s bytes, line by line until the hold, then as they come."""
        buffer = b""
        async for data in inner:
            if self.held.is_set():
                yield data
                continue
            buffer += data
            while not self.held.is_set() and b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.startswith(b"data: {"):
                    choice = json.loads(line[6:])["choices"][0]
                    self.passed += len(choice.get("token_ids") or [])
                yield line + b"\n"
                if self.passed >= self.tokens and not self._release.is_set():
                    self.held.set()
                    self.log("held")
                    try:
                        await self._release.wait()
                    except asyncio.CancelledError:
                        self._over.set()
                        self.log("closed while held")
                        raise
            if self.held.is_set() and buffer:
                yield buffer
                buffer = b""
        if buffer:
            yield buffer
        self._over.set()
        self.log("ended")


class _HeldStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, hold: Hold) -> None:
        self._inner = inner
        self._hold = hold

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for data in self._hold._stream(self._inner):
            yield data

    async def aclose(self) -> None:
        await self._inner.aclose()


class _HoldingTransport(httpx.AsyncBaseTransport):
    def __init__(self, hold: Hold) -> None:
        self._inner = httpx.AsyncHTTPTransport(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
        self._hold = hold

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self._hold.log(f"{request.method} {request.url.path}")
        response = await self._inner.handle_async_request(request)
        if request.url.path != COMPLETIONS or self._hold._claimed:
            return response
        self._hold._claimed = True
        self._hold.log("opened")
        self._hold.opened.set()
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(response.status_code, headers=response.headers,
                              stream=_HeldStream(response.stream, self._hold),
                              extensions=response.extensions)

    async def aclose(self) -> None:
        await self._inner.aclose()


async def hold_calls(server: VLLMServer, tokens: int) -> Hold:
    """Holds `server`'s next completion stream once `tokens` tokens have passed (module
    docstring); the server's other requests pass, logged."""
    hold = Hold(tokens)
    old = server.client
    server.client = httpx.AsyncClient(base_url=old.base_url, headers=old.headers,
                                      timeout=old.timeout, transport=_HoldingTransport(hold))
    await old.aclose()
    return hold
