"""A TCP proxy of our own that drops and stalls connections (loopback only).

Each accepted connection is, at random: passed through; stalled (its first bytes held
back for a while); or dropped, either at once or after a short random lifetime.
Counts every connection and every drop. Runs its own asyncio loop in a thread.
"""

from __future__ import annotations

import asyncio
import random
import threading


class ChaosProxy:
    def __init__(self, upstream_port: int, *, seed: int = 0, drop: float = 0.25,
                 stall: float = 0.15, stall_s: float = 0.5) -> None:
        self.upstream_port = upstream_port
        self.rng = random.Random(seed)
        self.drop, self.stall, self.stall_s = drop, stall, stall_s
        self.connections = self.dropped = self.stalled = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ChaosProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        roll = self.rng.random()
        lifetime = None
        if roll < self.drop:
            self.dropped += 1
            if self.rng.random() < 0.5:
                writer.close()
                return
            lifetime = self.rng.uniform(0.1, 3.0)  # cut mid-way, calls in flight
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        if self.drop <= roll < self.drop + self.stall:
            self.stalled += 1
            await asyncio.sleep(self.stall_s)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        tasks = [asyncio.ensure_future(pipe(reader, up_writer)),
                 asyncio.ensure_future(pipe(up_reader, writer))]
        try:
            await asyncio.wait_for(asyncio.gather(*tasks), lifetime)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            for t in tasks:
                t.cancel()
            writer.close()
            up_writer.close()
