"""The OpenAI shim under agent-shaped load, two source trees side by side in one run.

Each tree's `swarmrl serve --engine echo` (the echo engine answers at once, so all that
is measured is the HTTP door: auth, rendering, the registry, recording, the response)
runs in a child process with that tree's PYTHONPATH; this tree's SDK opens the
episodes over gRPC (the contract is the same), before the clock starts. Many episodes, each with its own
key, each 8 growing turns of `POST /v1/chat/completions` (the reply goes back into the
history, then a new user message), are played by C concurrent callers over keep-alive
connections from one shared aiohttp pool (not the `openai` client, whose own cost would
hide the server's). The trees alternate (A B A B) so that drift on a shared machine
falls on both alike; a table prints every run, then each tree's median calls/s, the
p50 latency it adds over the floor and the server's CPU time per call (from /proc: on a
machine shared with other work, the figure least moved by it), and the ratios of the
last tree to the first.

The same episodes are also played over gRPC (`--doors http grpc`, the default): 8 turns
of `EpisodeService.Generate` with chat input and `result_only`, C callers sharing one
channel (HTTP/2 multiplexes them, as the SDK does), from raw generated stubs so that the
client's own cost stays small.

The floors: a do-nothing HTTP server (raw asyncio, keep-alive) answering every call
with a canned chat completion of the same size, and a do-nothing gRPC server answering
every Generate with a canned result of the same size, each driven by the same load
generator. No tree can beat its door's floor: if a tree comes close, the load generator
is the limit.

    git worktree add --detach /tmp/bench-main main
    python benchmarks/shim_load.py --trees main=/tmp/bench-main serving=.
    python benchmarks/shim_load.py --doors grpc --concurrency 1 64
    python benchmarks/shim_load.py --trees serving=. --repeats 1 --profile /tmp/shim.txt

`--profile FILE` runs the last tree once more at the highest concurrency under py-spy
and prints where the server's time goes (own time by function, and time inside each
swarmrl_server module); the raw stacks go to FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "sdk_python")]  # the load generator's SDK opens the episodes
TURNS = 8
MAX_TOKENS = 16


def free_port() -> int:
    with socket.socket() as s:  # this script must not import either tree's server
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tree_env(tree: Path) -> dict[str, str]:
    paths = [tree / "sdk_python", tree / "server", tree]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, paths)),
            "PYTHONUNBUFFERED": "1"}


# -- servers ----------------------------------------------------------------------------


class Server:
    """`swarmrl serve --engine echo` of one tree, in a child process."""

    def __init__(self, tree: Path, cache_dir: str, data_dir: Path) -> None:
        self.tree, self.port, self.http_port = tree, free_port(), free_port()
        data_dir.mkdir(parents=True, exist_ok=True)
        self.log = data_dir.parent / f"server-{self.port}.log"
        cmd = [sys.executable, "-m", "swarmrl_server.cli", "--model", "tiny", "--engine", "echo",
               "--port", str(self.port), "--http-port", str(self.http_port),
               "--data-dir", str(data_dir), "--cache-dir", cache_dir,
               "--log-level", "warning", "--max-inflight", "100000"]
        self.proc = subprocess.Popen(cmd, cwd=tree, env=tree_env(tree), stdout=self.log.open("w"),
                                     stderr=subprocess.STDOUT)
        marker = f"serving gRPC on 127.0.0.1:{self.port}".encode()
        deadline = time.monotonic() + 300
        while marker not in self.log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def play_episodes(name: str, door: str, target: str, n: int, concurrency: int,
                        pid: int) -> Run:
    """Opens `n` episodes (each with its own key) through the SDK, plays them through
    `door`, ends them. The SDK's session stays open meanwhile: a closed session aborts its
    episodes."""
    from swarmrl import AsyncSwarmClient

    async with AsyncSwarmClient(target) as client:
        eps = [await client.start_episode(task_id="load") for _ in range(n)]
        if door == "http":
            run = await play(name, [(e.openai_base_url, e.openai_api_key) for e in eps],
                             concurrency, pid)
        else:
            run = await play_grpc(name, target, [e.id for e in eps], concurrency, pid)
        for e in eps:
            await e.end(reward=0.0)
    return run


CANNED = json.dumps({
    "id": "chatcmpl-" + "0" * 32, "object": "chat.completion", "created": 0, "model": "tiny",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "x" * 48},
                 "finish_reason": "length", "logprobs": None}],
    "usage": {"prompt_tokens": 120, "completion_tokens": MAX_TOKENS, "total_tokens": 136},
    "swarmrl": {"episode_id": "ep-" + "0" * 32, "call_ids": ["call-" + "0" * 32],
                "policy_version": 0, "version_spans": [[[0, 0, MAX_TOKENS]]],
                "overridden": {}, "fork_reason": ""},
}).encode()


class _Floor(asyncio.Protocol):
    """HTTP/1.1 keep-alive: every request (headers + Content-Length body) gets CANNED."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            length = 0
            for line in self.buf[:head_end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            end = head_end + 4 + length
            if len(self.buf) < end:
                return
            self.buf = self.buf[end:]
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                 b"content-length: " + str(len(CANNED)).encode() +
                                 b"\r\n\r\n" + CANNED)


def canned_result() -> bytes:
    """A Generate result the size of the echo engine's: 16 tokens, their logprobs, text."""
    from swarmrl_proto.v1 import episode_service_pb2 as pb
    from swarmrl_proto.v1 import types_pb2

    return pb.GenerateResponse(result=pb.GenerateResult(
        call_id="call-" + "0" * 32, finish_reason=types_pb2.FINISH_REASON_LENGTH,
        prompt_ids=list(range(120)), completion_ids=list(range(MAX_TOKENS)),
        logprobs=[-0.5] * MAX_TOKENS, text="x" * 48,
        message=types_pb2.ChatMessage(role=types_pb2.ROLE_ASSISTANT, content="x" * 48),
        model="tiny",
    )).SerializeToString()


def serve_floor(port: int, grpc_port: int) -> None:
    """Both floors in this process: HTTP on `port`, gRPC on `grpc_port`."""
    import grpc

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Floor, "127.0.0.1", port, backlog=1024)
        canned = canned_result()

        async def generate(request: bytes, context: object) -> AsyncIterator[bytes]:
            yield canned  # no (de)serializers: the request is not parsed, the reply is bytes

        rpc = grpc.aio.server()
        rpc.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            "swarmrl.v1.EpisodeService",
            {"Generate": grpc.unary_stream_rpc_method_handler(generate)})])
        rpc.add_insecure_port(f"127.0.0.1:{grpc_port}")
        await rpc.start()
        print("floor ready", flush=True)
        await server.serve_forever()

    asyncio.run(serve())


# -- the load generator -----------------------------------------------------------------


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (0 for the floor: not measured)."""
    if not pid:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    name: str
    door: str
    concurrency: int
    calls: int
    wall_s: float
    latencies_ms: list[float]
    server_cpu_s: float = 0.0

    @property
    def cpu_ms_per_call(self) -> float:
        return 1000 * self.server_cpu_s / self.calls

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.wall_s

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ms)

    @property
    def p99_ms(self) -> float:
        return statistics.quantiles(self.latencies_ms, n=100)[98]


async def timed(name: str, door: str, concurrency: int,
                caller: Callable[[int], Awaitable[None]], latencies: list[float],
                pid: int) -> Run:
    """Runs callers 0..C-1 at once; their wall time and the server's CPU time meanwhile."""
    t0, cpu0 = time.perf_counter(), cpu_s(pid)
    await asyncio.gather(*(caller(w) for w in range(concurrency)))
    wall, cpu = time.perf_counter() - t0, cpu_s(pid) - cpu0
    return Run(name, door, concurrency, len(latencies), wall, latencies, cpu)


async def play(name: str, episodes: list[tuple[str, str]], concurrency: int,
               pid: int = 0) -> Run:
    """C callers; caller w plays episodes w, w + C, ... (8 turns each) back to back."""
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency, keepalive_timeout=120)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def caller(w: int) -> None:
            for base_url, key in episodes[w::concurrency]:
                messages = [{"role": "user", "content": f"Tell me about {uuid.uuid4().hex[:8]}."}]
                headers = {"Authorization": f"Bearer {key}"}
                for turn in range(TURNS):
                    body = {"model": "tiny", "messages": messages, "max_tokens": MAX_TOKENS,
                            "temperature": 0}
                    t0 = time.perf_counter()
                    async with session.post(f"{base_url}/chat/completions", json=body,
                                            headers=headers) as r:
                        reply = await r.json(content_type=None)
                        if r.status != 200:
                            raise RuntimeError(f"{name}: HTTP {r.status}: {reply}")
                    latencies.append((time.perf_counter() - t0) * 1000)
                    messages += [reply["choices"][0]["message"],
                                 {"role": "user", "content": f"And turn {turn + 2}?"}]

        return await timed(name, "http", concurrency, caller, latencies, pid)


async def play_grpc(name: str, target: str, episode_ids: list[str], concurrency: int,
                    pid: int = 0) -> Run:
    """C callers on one channel; caller w plays episodes w, w + C, ... (8 turns each) back to
    back, each turn one Generate (chat input, result_only) whose reply goes into the
    history."""
    import grpc

    from swarmrl_proto.v1 import episode_service_pb2 as pb
    from swarmrl_proto.v1 import episode_service_pb2_grpc as pb_grpc
    from swarmrl_proto.v1 import types_pb2

    latencies: list[float] = []
    sampling = types_pb2.SamplingParams(temperature=0, max_tokens=MAX_TOKENS)

    def user(text: str) -> types_pb2.ChatMessage:
        return types_pb2.ChatMessage(role=types_pb2.ROLE_USER, content=text)

    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.EpisodeServiceStub(channel)

        async def caller(w: int) -> None:
            for episode_id in episode_ids[w::concurrency]:
                messages = [user(f"Tell me about {uuid.uuid4().hex[:8]}.")]
                for turn in range(TURNS):
                    request = pb.GenerateRequest(
                        episode_id=episode_id, chat=pb.ChatInput(messages=messages),
                        sampling=sampling, request_id=uuid.uuid4().hex, result_only=True)
                    t0 = time.perf_counter()
                    replies = [r async for r in stub.Generate(request)]
                    latencies.append((time.perf_counter() - t0) * 1000)
                    if len(replies) != 1 or not replies[0].HasField("result"):
                        raise RuntimeError(f"{name}: expected one result, got {replies}")
                    messages += [replies[0].result.message, user(f"And turn {turn + 2}?")]

        return await timed(name, "grpc", concurrency, caller, latencies, pid)


def episodes_for(concurrency: int, min_calls: int) -> int:
    return concurrency * max(1, -(-min_calls // (concurrency * TURNS)))


# -- profile ----------------------------------------------------------------------------


def summarize_profile(raw: Path, top: int = 15) -> None:
    """py-spy's collapsed stacks: own time by function, and time inside server modules."""
    own: collections.Counter[str] = collections.Counter()
    inside: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n, frames = int(count), stack.split(";")
        total += n
        own[frames[-1].split(" (")[0] + " (" + frames[-1].rpartition("/")[2]] += n
        modules = {f.split("(")[-1].split(":")[0] for f in frames if "swarmrl_server" in f}
        for m in modules:
            inside[m.split("swarmrl_server/")[-1]] += n
    if not total:
        print("(empty profile)")
        return
    print(f"\nprofile: {total} samples of the server at the highest concurrency")
    print("own time (the frame on top):")
    for name, n in own.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {name}")
    print("time inside swarmrl_server modules (inclusive):")
    for name, n in inside.most_common(top):
        print(f"  {100 * n / total:5.1f}%  {name}")


# -- main -------------------------------------------------------------------------------


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trees", nargs="+", default=[f"this={REPO}"],
                   help="NAME=PATH of each source tree (the first is the baseline)")
    p.add_argument("--doors", nargs="+", choices=["http", "grpc"], default=["http", "grpc"])
    p.add_argument("--concurrency", nargs="+", type=int, default=[1, 256])
    p.add_argument("--repeats", type=int, default=2, help="alternations of the trees")
    p.add_argument("--min-calls", type=int, default=1024,
                   help="calls per run at least (enough that a server's one-time costs, "
                   "such as its first call's lazy imports, do not show as a cost per call)")
    p.add_argument("--cache-dir", default=os.environ.get(
        "SWARMRL_CACHE", str(Path.home() / ".cache/swarmrl")))
    p.add_argument("--profile", default="",
                   help="py-spy raw stacks of the last tree's first door to FILE")
    p.add_argument("--floor-serve", type=int, nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.floor_serve:
        serve_floor(*args.floor_serve)
        return
    trees = [(name, Path(path).resolve()) for name, _, path in
             (t.partition("=") for t in args.trees)]
    floor_port, floor_grpc = free_port(), free_port()
    floor = subprocess.Popen([sys.executable, __file__, "--floor-serve", str(floor_port),
                              str(floor_grpc)], stdout=subprocess.PIPE, text=True)
    assert floor.stdout is not None and floor.stdout.readline().strip() == "floor ready"
    runs: list[Run] = []
    print(f"{os.cpu_count()} cores; {TURNS}-turn episodes, max_tokens {MAX_TOKENS}, echo engine; "
          "http: a keep-alive aiohttp pool; grpc: one channel, raw stubs")
    print(f"{'run':<11} {'door':<4} {'conc.':>5} {'calls':>6} {'calls/s':>9} {'p50 ms':>8} "
          f"{'p99 ms':>8} {'cpu ms/call':>11}")

    def show(run: Run) -> None:
        runs.append(run)
        print(f"{run.name:<11} {run.door:<4} {run.concurrency:>5} {run.calls:>6} "
              f"{run.calls_per_s:>9.1f} {run.p50_ms:>8.2f} {run.p99_ms:>8.2f} "
              f"{run.cpu_ms_per_call:>11.2f}", flush=True)

    def play_floor(door: str, c: int) -> Run:
        n = episodes_for(c, args.min_calls)
        if door == "http":
            return asyncio.run(play("floor", [(f"http://127.0.0.1:{floor_port}/v1", "sk")] * n, c))
        return asyncio.run(play_grpc("floor", f"127.0.0.1:{floor_grpc}", ["ep"] * n, c))

    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.repeats):
                for door in args.doors:
                    for c in args.concurrency:
                        show(play_floor(door, c))
                for name, tree in trees:
                    server = Server(tree, args.cache_dir, Path(tmp) / f"{name}-{r}" / "data")
                    try:
                        for door in args.doors:
                            for c in args.concurrency:
                                show(asyncio.run(play_episodes(
                                    name, door, f"127.0.0.1:{server.port}",
                                    episodes_for(c, args.min_calls), c, server.proc.pid)))
                    finally:
                        server.stop()
            if args.profile:
                name, tree = trees[-1]
                c = max(args.concurrency)
                server = Server(tree, args.cache_dir, Path(tmp) / "profile" / "data")
                try:
                    spy = subprocess.Popen(
                        [str(Path(sys.executable).parent / "py-spy"), "record", "--pid",
                         str(server.proc.pid), "--format", "raw", "--output", args.profile,
                         "--rate", "250", "--nonblocking"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(1.0)
                    show(asyncio.run(play_episodes(
                        f"{name}+spy", args.doors[0], f"127.0.0.1:{server.port}",
                        episodes_for(c, args.min_calls), c, server.proc.pid)))
                    spy.send_signal(signal.SIGINT)
                    spy.wait(timeout=120)
                finally:
                    server.stop()
    finally:
        floor.kill()
        floor.wait()
    print_summary(runs, [name for name, _ in trees], args.doors, args.concurrency)
    if args.profile and Path(args.profile).exists():
        summarize_profile(Path(args.profile))


def print_summary(runs: list[Run], names: list[str], doors: list[str],
                  levels: list[int]) -> None:
    def median(name: str, door: str, c: int, key: str) -> float:
        return statistics.median(getattr(r, key) for r in runs
                                 if r.name == name and r.door == door and r.concurrency == c)

    print("\nmedians over the repeats (added p50: over the floor's p50 at the same door and "
          "concurrency)")
    print(f"{'tree':<10} {'door':<4} {'conc.':>5} {'calls/s':>9} {'floor %':>8} "
          f"{'added p50 ms':>13} {'cpu ms/call':>12}")
    for door in doors:
        for c in levels:
            floor_rate = median("floor", door, c, "calls_per_s")
            floor_p50 = median("floor", door, c, "p50_ms")
            for name in names:
                rate = median(name, door, c, "calls_per_s")
                print(f"{name:<10} {door:<4} {c:>5} {rate:>9.1f} {100 * rate / floor_rate:>7.1f}% "
                      f"{median(name, door, c, 'p50_ms') - floor_p50:>13.2f} "
                      f"{median(name, door, c, 'cpu_ms_per_call'):>12.2f}")
    if len(names) > 1:
        base, new = names[0], names[-1]
        print(f"\nratios {new} / {base}:")
        for door in doors:
            for c in levels:
                floor_p50 = median("floor", door, c, "p50_ms")
                rate = (median(new, door, c, "calls_per_s")
                        / median(base, door, c, "calls_per_s"))
                added = ((median(new, door, c, "p50_ms") - floor_p50)
                         / (median(base, door, c, "p50_ms") - floor_p50))
                cpu = (median(new, door, c, "cpu_ms_per_call")
                       / median(base, door, c, "cpu_ms_per_call"))
                print(f"  {door:<4} c={c:<4} calls/s x{rate:.3f}   added p50 latency "
                      f"x{added:.3f}   server cpu per call x{cpu:.3f}")


if __name__ == "__main__":
    main()
