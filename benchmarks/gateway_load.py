"""What the front doors cost: a `swarmrl serve --engine echo` child under agent-shaped load.

The echo engine answers at once (no model time), so everything measured is the
gateway: gRPC or HTTP, auth, chat rendering and tokenizing, recording in SQLite,
streaming. N concurrent episodes each play 8 growing turns (the reply goes back into
the history, then a new user message), through

  - grpc: the Python SDK (`AsyncSwarmClient`, one channel, `episode.chat`);
  - shim: the official `openai` client (keep-alive, one client per episode, as agents
    do), `chat.completions.create` against the episode's base URL and key;
  - responses: the same client, `responses.create` (the Responses API, which the OpenAI
    Agents SDK's default model speaks) with the history as input items.

Per door and concurrency it prints calls/s, p50/p99 latency, the p50 *added* over an
in-process direct call of the same engine on the same prompts, server CPU ms per
call (from /proc, the server process only) and server RSS. First, it opens idle
episodes and prints how many fit in 2 GiB of server memory.

Then the floor of each door on this machine, with the same load generator: a server
that does no work at all answers every call with a canned reply of the same size
(`floor grpc`: grpc.aio, one reply message, driven by a bare grpc.aio stub, since the
SDK needs a real server; `floor shim` / `floor responses`: FastAPI on uvicorn with the
shim's listener, driven by the official openai client exactly as above). No gateway written in Python
on these cores can beat its floor's calls/s; what the floor's load generator spends
per call ("client ms") is CPU the server cannot have.

    python benchmarks/gateway_load.py                       # c = 1 16 64 256, every door
    python benchmarks/gateway_load.py --doors shim responses --concurrency 1 16 64 --idle 0
    python benchmarks/gateway_load.py --doors grpc --concurrency 1 256 --profile prof.txt

`--profile FILE` runs the server under py-spy (if installed) and writes its top
functions: where a call's server time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import openai  # noqa: E402
from fastapi import Request, Response  # noqa: E402 - the floor's route annotations

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
        return (f"{self.door:15} {self.concurrency:5d} {self.calls:6d} "
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


Reply = Callable[[list[dict[str, Any]]], Awaitable[str]]
"""One call of a door: the conversation so far in, the assistant's reply text out."""


async def play_episode(k: int, reply: Reply, latencies: list[float]) -> None:
    """Episode `k`: TURNS growing turns, each call's latency appended to `latencies`."""
    messages: list[dict[str, Any]] = []
    for turn in range(TURNS):
        messages.append(user_turn(k, turn))
        start = time.perf_counter()
        text = await reply(messages)
        latencies.append((time.perf_counter() - start) * 1000)
        messages.append({"role": "assistant", "content": text})


def openai_reply(base_url: str, api_key: str) -> Reply:
    """One official openai client per agent, as agents run (its own keep-alive connection)."""
    oai = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120)

    async def reply(messages: list[dict[str, Any]]) -> str:
        r = await oai.chat.completions.create(model="tiny", messages=messages)  # type: ignore[arg-type]
        return r.choices[0].message.content or ""

    return reply


def openai_responses_reply(base_url: str, api_key: str) -> Reply:
    """The Responses API door: the same client, the history sent back as input items."""
    oai = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120)

    async def reply(messages: list[dict[str, Any]]) -> str:
        r = await oai.responses.create(model="tiny", input=messages)  # type: ignore[arg-type]
        return r.output_text

    return reply


OPENAI_DOORS = {"shim": openai_reply, "responses": openai_responses_reply}
"""The HTTP doors, each driven by the official openai client."""


def rounds_for(concurrency: int, min_calls: int) -> int:
    return max(1, -(-min_calls // (concurrency * TURNS)))


async def measure(door: str, concurrency: int, rounds: int, replies: Callable[[int], Reply],
                  stats: ServerStats) -> Level:
    """Plays concurrency x rounds episodes (`replies(k)`: episode k's door) and measures
    calls/s, latencies, and server and load-generator CPU."""
    latencies: list[float] = []

    async def worker(w: int) -> None:
        for r in range(rounds):
            k = w * rounds + r
            await play_episode(k, replies(k), latencies)

    cpu0, client0, t0 = stats.cpu_ms(), time.process_time(), time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    wall, cpu = time.perf_counter() - t0, stats.cpu_ms() - cpu0
    client_cpu = (time.process_time() - client0) * 1000
    return Level(door, concurrency, len(latencies), wall, latencies, cpu, client_cpu,
                 stats.rss_bytes() / 2**20)


async def run_level(door: str, target: str, concurrency: int, min_calls: int,
                    stats: ServerStats) -> Level:
    rounds = rounds_for(concurrency, min_calls)
    async with AsyncSwarmClient(target) as client:
        episodes = [await client.start_episode(task_id=f"load-{uuid.uuid4().hex[:6]}")
                    for _ in range(concurrency * rounds)]

        def replies(k: int) -> Reply:
            ep = episodes[k]
            if door in OPENAI_DOORS:
                return OPENAI_DOORS[door](ep.openai_base_url, ep.openai_api_key)

            async def reply(messages: list[dict[str, Any]]) -> str:
                return (await ep.chat(messages)).text

            return reply

        level = await measure(door, concurrency, rounds, replies, stats)
        for ep in episodes:
            await ep.end(reward=0.0)
    return level


# -- the floors: servers that do no work ------------------------------------------------

GENERATE = "/swarmrl.v1.EpisodeService/Generate"


def _canned_result() -> bytes:
    """A GenerateResponse shaped like a turn-4 echo reply (prompt ids, 17 completion ids)."""
    from swarmrl import _convert
    from swarmrl_proto.v1 import episode_service_pb2 as ep_pb
    from swarmrl_proto.v1 import types_pb2 as t_pb

    reply = {"role": "assistant", "content": "word " * 16}
    result = ep_pb.GenerateResult(
        call_id=f"call-{uuid.uuid4().hex}", prompt_ids=list(range(1000, 1120)),
        completion_ids=list(range(200, 217)), logprobs=[-2.0794] * 17, policy_version=0,
        text=reply["content"], message=_convert.chat_input([reply], None).messages[0],
        usage=t_pb.Usage(prompt_tokens=120, completion_tokens=17), model="tiny",
    )
    return ep_pb.GenerateResponse(result=result).SerializeToString()


def _canned_completion() -> bytes:
    return json.dumps({
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": 0,
        "model": "tiny", "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "word " * 16}}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 17, "total_tokens": 137},
    }).encode()


def _canned_response() -> bytes:
    return json.dumps({
        "id": f"resp_{uuid.uuid4().hex}", "object": "response", "created_at": 0,
        "model": "tiny", "status": "completed", "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [], "output": [{
            "type": "message", "id": f"msg_{uuid.uuid4().hex}", "role": "assistant",
            "status": "completed", "content": [{"type": "output_text", "text": "word " * 16,
                                                "annotations": []}]}],
        "usage": {"input_tokens": 120, "output_tokens": 17, "total_tokens": 137,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    }).encode()


def _serve_floor(door: str, ready: Any) -> None:
    """Child process: the do-nothing server of `door`; puts its port on `ready`."""
    if door == "grpc":
        import grpc

        async def serve() -> None:
            body = _canned_result()

            async def generate(request: bytes, context: Any) -> Any:
                yield body

            server = grpc.aio.server()
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
                "swarmrl.v1.EpisodeService",
                {"Generate": grpc.unary_stream_rpc_method_handler(generate)}),))
            ready.put(server.add_insecure_port("127.0.0.1:0"))
            await server.start()
            await server.wait_for_termination()

        asyncio.run(serve())
        return
    import socket

    import uvicorn
    from fastapi import FastAPI

    from swarmrl_server.http.app import listening_socket

    app = FastAPI()
    body = _canned_response() if door == "responses" else _canned_completion()

    @app.post("/v1/chat/completions")
    @app.post("/v1/responses")
    async def answer(request: Request) -> Response:
        await request.json()  # the request is read and parsed, as any server must
        return Response(body, media_type="application/json")

    sock = listening_socket(socket.AF_INET)
    sock.bind(("127.0.0.1", 0))
    ready.put(sock.getsockname()[1])
    uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                  timeout_keep_alive=300)).run(sockets=[sock])


async def run_floor(door: str, port: int, concurrency: int, min_calls: int,
                    stats: ServerStats) -> Level:
    rounds = rounds_for(concurrency, min_calls)
    if door in OPENAI_DOORS:
        return await measure(
            f"floor {door}", concurrency, rounds,
            lambda k: OPENAI_DOORS[door](f"http://127.0.0.1:{port}/v1", "sk-floor"), stats)
    import grpc

    from swarmrl import _convert
    from swarmrl_proto.v1 import episode_service_pb2 as ep_pb

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        generate = channel.unary_stream(GENERATE, request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=ep_pb.GenerateResponse.FromString)

        async def reply(messages: list[dict[str, Any]]) -> str:
            request = ep_pb.GenerateRequest(
                episode_id="ep", chat=_convert.chat_input(messages, None),
                request_id=uuid.uuid4().hex, result_only=True)
            text = ""
            async for response in generate(request):
                text = response.result.text
            return text

        return await measure(f"floor {door}", concurrency, rounds, lambda k: reply, stats)


async def floors(doors: list[str], concurrency: list[int], min_calls: int) -> list[Level]:
    levels = []
    ctx = multiprocessing.get_context("spawn")
    for door in doors:
        ready = ctx.Queue()
        child = ctx.Process(target=_serve_floor, args=(door, ready), daemon=True)
        child.start()
        try:
            port = await asyncio.to_thread(ready.get, True, 120)
            await asyncio.sleep(0.5)  # the shim's uvicorn listens just after the put
            for c in concurrency:
                level = await run_floor(door, port, c, min_calls, ServerStats(child.pid))  # type: ignore[arg-type]
                levels.append(level)
                print(level.row(0.0), flush=True)
        finally:
            child.kill()
            child.join()
    return levels


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
                    [str(Path(sys.executable).parent / "py-spy"), "record",  # the venv's
                     "--pid", str(stats.pid), "--format", "raw", "--output", args.profile, "--rate", "200", "--nonblocking", *(["--native"] if os.environ.get("PYSPY_NATIVE") else [])],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print("door            conc.  calls   calls/s  p50 ms   p99 ms  +p50 ms  cpu ms  "
                  "client ms RSS MiB\n(cpu ms: server CPU per call; client ms: this load "
                  "generator's CPU per call; +p50 of a floor: over nothing)")
            for door in args.doors:
                for c in args.concurrency:
                    level = await run_level(door, server.target, c, args.min_calls, stats)
                    print(level.row(direct), flush=True)
            if profiler is not None:
                profiler.send_signal(2)
                profiler.wait(timeout=60)
                profiler = None
            if args.floors:
                await floors(args.doors, args.concurrency, args.min_calls)
        finally:
            if profiler is not None:
                profiler.kill()
            server.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--doors", nargs="+", choices=("grpc", "shim", "responses"),
                   default=["grpc", "shim", "responses"])
    p.add_argument("--concurrency", nargs="+", type=int, default=[1, 16, 64, 256])
    p.add_argument("--min-calls", type=int, default=400,
                   help="calls per level at least (episodes are repeated at low concurrency)")
    p.add_argument("--idle", type=int, default=5000, help="idle episodes to open (0: skip)")
    p.add_argument("--cache-dir", default=os.environ.get("SWARMRL_CACHE",
                                                         str(Path.home() / ".cache/swarmrl")))
    p.add_argument("--profile", default="", help="py-spy raw profile of the server to FILE")
    p.add_argument("--no-floors", dest="floors", action="store_false",
                   help="skip the do-nothing servers' rows")
    asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    main()
