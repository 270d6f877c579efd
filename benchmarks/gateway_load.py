"""What the front doors cost: a `swarmrl serve --engine echo` child under agent-shaped load.

The echo engine answers at once (no model time), so everything measured is the
gateway: gRPC or HTTP, auth, chat rendering and tokenizing, recording in SQLite,
streaming. N concurrent episodes each play 8 growing turns (the reply goes back into
the history, then a new user message), through

  - grpc: the Python SDK (`AsyncSwarmClient`, one channel, `episode.chat`);
  - shim: the official `openai` client (keep-alive, one client per episode, as agents
    do), `chat.completions.create` against the episode's base URL and key.

Per door and concurrency it prints calls/s, p50/p99 latency, the p50 *added* over an
in-process direct call of the same engine on the same prompts, server CPU ms per
call (from /proc, the server process only) and server RSS. Last, it opens idle
episodes and prints how many fit in 2 GiB of server memory.

    python benchmarks/gateway_load.py                       # c = 1 16 64 256, both doors
    python benchmarks/gateway_load.py --doors grpc --concurrency 1 256 --profile prof.txt

`--profile FILE` runs the server under py-spy (if installed) and writes its top
functions: where a call's server time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import openai  # noqa: E402

from swarmrl import AsyncSwarmClient  # noqa: E402
from tests.helpers import ServerProcess  # noqa: E402

TURNS = 8
GIB = 1024**3
CLK_TCK = os.sysconf("SC_CLK_TCK")


def user_turn(episode: int, turn: int) -> dict[str, str]:
    return {"role": "user", "content": f"Episode {episode}, step {turn}: what do you see now?"}


@dataclass
class Level:
    door: str
    concurrency: int
    calls: int
    wall_s: float
    latencies_ms: list[float]
    cpu_ms: float
    client_cpu_ms: float
    rss_mib: float

    def row(self, direct_p50_ms: float) -> str:
        lat = sorted(self.latencies_ms)
        p50 = lat[len(lat) // 2]
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
        return (f"{self.door:5} {self.concurrency:5d} {self.calls:6d} "
                f"{self.calls / self.wall_s:9.0f} {p50:8.2f} {p99:8.2f} "
                f"{p50 - direct_p50_ms:8.2f} {self.cpu_ms / self.calls:8.3f} "
                f"{self.client_cpu_ms / self.calls:8.3f} {self.rss_mib:8.0f}")


class ServerStats:
    """CPU time and RSS of the server process, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cpu_ms(self) -> float:
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1000 / CLK_TCK  # utime + stime

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0


# -- the direct baseline ---------------------------------------------------------------


async def direct_p50_ms(model_dir: Path, calls: int) -> float:
    """p50 of an in-process echo engine call on prompts shaped like the load's."""
    from swarmrl_server.engine.base import GenerationOutput, SamplingParams
    from swarmrl_server.engine.echo import EchoEngine
    from swarmrl_server.episodes.chat import encode, render_text

    engine = EchoEngine.from_pretrained("tiny", model_dir)
    await engine.start()
    latencies = []
    messages: list[dict[str, Any]] = []
    for i in range(calls):
        if i % TURNS == 0:
            messages = []
        messages.append(user_turn(0, i % TURNS))
        prompt = encode(engine.tokenizer, render_text(engine.tokenizer, messages, None,
                                                      generation_prompt=True))
        start = time.perf_counter()
        async for item in engine.generate(prompt, SamplingParams(temperature=1.0)):
            if isinstance(item, GenerationOutput):
                messages.append({"role": "assistant", "content": item.text})
        latencies.append((time.perf_counter() - start) * 1000)
    await engine.stop()
    return statistics.median(latencies)


# -- the doors -------------------------------------------------------------------------


async def run_level(door: str, target: str, concurrency: int, min_calls: int,
                    stats: ServerStats) -> Level:
    rounds = max(1, -(-min_calls // (concurrency * TURNS)))
    latencies: list[float] = []
    async with AsyncSwarmClient(target) as client:
        episodes = [await client.start_episode(task_id=f"load-{uuid.uuid4().hex[:6]}")
                    for _ in range(concurrency * rounds)]

        async def grpc_episode(k: int) -> None:
            ep = episodes[k]
            messages: list[dict[str, Any]] = []
            for turn in range(TURNS):
                messages.append(user_turn(k, turn))
                start = time.perf_counter()
                completion = await ep.chat(messages)
                latencies.append((time.perf_counter() - start) * 1000)
                messages.append({"role": "assistant", "content": completion.text})

        async def shim_episode(k: int) -> None:
            ep = episodes[k]
            # One client per agent, as agents run (its own keep-alive connection).
            oai = openai.AsyncOpenAI(base_url=ep.openai_base_url, api_key=ep.openai_api_key,
                                     max_retries=0, timeout=120)
            messages: list[dict[str, Any]] = []
            for turn in range(TURNS):
                messages.append(user_turn(k, turn))
                start = time.perf_counter()
                r = await oai.chat.completions.create(model="tiny", messages=messages)
                latencies.append((time.perf_counter() - start) * 1000)
                messages.append({"role": "assistant", "content": r.choices[0].message.content})

        play = grpc_episode if door == "grpc" else shim_episode

        async def worker(w: int) -> None:
            for r in range(rounds):
                await play(w * rounds + r)

        cpu0, client0, t0 = stats.cpu_ms(), time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        wall, cpu = time.perf_counter() - t0, stats.cpu_ms() - cpu0
        client_cpu = (time.process_time() - client0) * 1000
        rss = stats.rss_bytes() / 2**20
        for ep in episodes:
            await ep.end(reward=0.0)
    return Level(door, concurrency, len(latencies), wall, latencies, cpu, client_cpu, rss)


async def idle_episodes(target: str, count: int, stats: ServerStats) -> tuple[float, float]:
    """Server bytes per idle open episode: (just started, after one chat call)."""
    async with AsyncSwarmClient(target) as client:
        await client.start_episode(task_id="warm")  # session opened, code paths warm
        before = stats.rss_bytes()
        sem = asyncio.Semaphore(64)

        async def start() -> Any:
            async with sem:
                return await client.start_episode(task_id="idle")

        episodes = await asyncio.gather(*(start() for _ in range(count)))
        started = stats.rss_bytes()

        async def one_call(ep: Any) -> None:
            async with sem:
                await ep.chat([user_turn(0, 0)])

        await asyncio.gather(*(one_call(ep) for ep in episodes))
        called = stats.rss_bytes()
    return (started - before) / count, (called - before) / count


async def main_async(args: argparse.Namespace) -> None:
    cache = Path(args.cache_dir)
    from swarmrl_server.models import resolve_model

    model_dir = resolve_model("tiny", cache)
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(
            data_dir=Path(tmp) / "data", cache_dir=cache, http_port=0,
            extra=["--model", "tiny", "--engine", "echo", "--log-level", "warning",
                   "--max-inflight", "100000"],
        )
        server.start()
        profiler = None
        try:
            stats = ServerStats(server.proc.pid)  # type: ignore[union-attr]
            print(f"server pid {stats.pid}, RSS at start {stats.rss_bytes() / 2**20:.0f} MiB; "
                  f"load generator in this process; {os.cpu_count()} cores", flush=True)
            if args.idle:  # first, on a fresh server: nothing freed earlier hides the growth
                per_started, per_called = await idle_episodes(server.target, args.idle, stats)
                print(f"idle open episodes ({args.idle:,} opened): "
                      f"{per_started / 1024:.1f} KiB each just started -> "
                      f"{2 * GIB / max(per_started, 1):,.0f} fit in 2 GiB; "
                      f"{per_called / 1024:.1f} KiB each after one chat call -> "
                      f"{2 * GIB / max(per_called, 1):,.0f} fit in 2 GiB", flush=True)
            direct = await direct_p50_ms(model_dir, 200)
            print(f"direct in-process echo engine call: p50 {direct:.3f} ms\n", flush=True)
            if args.profile:
                profiler = subprocess.Popen(
                    ["py-spy", "record", "--pid", str(stats.pid), "--format", "raw",
                     "--output", args.profile, "--rate", "200", "--nonblocking", *(["--native"] if os.environ.get("PYSPY_NATIVE") else [])],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print("door  conc.  calls   calls/s  p50 ms   p99 ms  +p50 ms  cpu ms  "
                  "client ms RSS MiB\n(cpu ms: server CPU per call; client ms: this load "
                  "generator's CPU per call)")
            for door in args.doors:
                for c in args.concurrency:
                    level = await run_level(door, server.target, c, args.min_calls, stats)
                    print(level.row(direct), flush=True)
            if profiler is not None:
                profiler.send_signal(2)
                profiler.wait(timeout=60)
                profiler = None
        finally:
            if profiler is not None:
                profiler.kill()
            server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--doors", nargs="+", choices=("grpc", "shim"), default=["grpc", "shim"])
    p.add_argument("--concurrency", nargs="+", type=int, default=[1, 16, 64, 256])
    p.add_argument("--min-calls", type=int, default=400,
                   help="calls per level at least (episodes are repeated at low concurrency)")
    p.add_argument("--idle", type=int, default=5000, help="idle episodes to open (0: skip)")
    p.add_argument("--cache-dir", default=os.environ.get("SWARMRL_CACHE",
                                                         str(Path.home() / ".cache/swarmrl")))
    p.add_argument("--profile", default="", help="py-spy raw profile of the server to FILE")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
