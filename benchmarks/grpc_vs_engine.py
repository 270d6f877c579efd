"""Tokens/s of the tiny model through gRPC vs a direct in-process engine call.

Both paths run the same HFEngine configuration on the same model: "direct" calls
`engine.generate` in this process; "grpc" sends Generate requests (token input,
streamed back) to a `swarmrl serve` child process over loopback. Each
concurrency level runs both paths back to back, repeated and interleaved, so
machine noise hits both alike; the table reports medians and the ratio.

    python benchmarks/grpc_vs_engine.py --concurrency 1 16 --max-tokens 128 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from swarmrl_proto.v1 import episode_service_pb2 as ep_pb  # noqa: E402
from swarmrl_proto.v1 import episode_service_pb2_grpc as ep_grpc  # noqa: E402
from swarmrl_proto.v1 import session_service_pb2 as s_pb  # noqa: E402
from swarmrl_proto.v1 import session_service_pb2_grpc as s_grpc  # noqa: E402
from swarmrl_proto.v1 import types_pb2 as t_pb  # noqa: E402
from swarmrl_server.config import default_torch_threads  # noqa: E402
from swarmrl_server.engine.base import GenerationOutput, SamplingParams  # noqa: E402
from swarmrl_server.engine.hf.engine import HFEngine  # noqa: E402
from swarmrl_server.models import resolve_model  # noqa: E402
from tests.helpers import ServerProcess  # noqa: E402

PROMPT = [5, 17, 33, 101, 7, 250, 12, 9]


async def run_direct(engine: HFEngine, concurrency: int, max_tokens: int, seed: int) -> tuple[int, float]:
    async def one(i: int) -> int:
        params = SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=seed + i)
        async for item in engine.generate(PROMPT, params):
            if isinstance(item, GenerationOutput):
                return len(item.completion_ids)
        return 0

    start = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(i) for i in range(concurrency))))
    return tokens, time.perf_counter() - start


async def run_grpc(target: str, concurrency: int, max_tokens: int, seed: int) -> tuple[int, float]:
    async with grpc.aio.insecure_channel(target) as channel:
        sessions = s_grpc.SessionServiceStub(channel)
        episodes = ep_grpc.EpisodeServiceStub(channel)
        session_id = uuid.uuid4().hex
        await sessions.OpenSession(s_pb.OpenSessionRequest(session_id=session_id))
        started = [
            await episodes.StartEpisode(ep_pb.StartEpisodeRequest(session_id=session_id, task_id="bench"))
            for _ in range(concurrency)
        ]

        async def one(i: int) -> int:
            request = ep_pb.GenerateRequest(
                episode_id=started[i].episode_id, tokens=ep_pb.TokenInput(token_ids=PROMPT),
                sampling=t_pb.SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=seed + i),
            )
            n = 0
            async for response in episodes.Generate(request):
                if response.HasField("result"):
                    n = len(response.result.completion_ids)
            return n

        start = time.perf_counter()
        tokens = sum(await asyncio.gather(*(one(i) for i in range(concurrency))))
        elapsed = time.perf_counter() - start
        for s in started:
            await episodes.AbortEpisode(ep_pb.AbortEpisodeRequest(episode_id=s.episode_id))
        return tokens, elapsed


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        path = resolve_model("tiny", cache)
        # The same torch thread count the server picks for itself (half the cores).
        torch.set_num_threads(args.torch_threads)
        engine = HFEngine.from_pretrained("tiny", path, max_batch_size=args.max_batch_size)
        await engine.start()
        server = ServerProcess(data_dir=Path(tmp) / "data", cache_dir=cache,
                               extra=["--max-batch-size", str(args.max_batch_size),
                                      "--torch-threads", str(args.torch_threads)]).start()
        try:
            # Warm both paths once (first-call allocations, channel set-up).
            await run_direct(engine, 2, 8, 0)
            await run_grpc(server.target, 2, 8, 0)
            rows = []
            for c in args.concurrency:
                direct, via = [], []
                for r in range(args.repeats):
                    tok, sec = await run_direct(engine, c, args.max_tokens, 1000 * r)
                    direct.append(tok / sec)
                    tok, sec = await run_grpc(server.target, c, args.max_tokens, 1000 * r)
                    via.append(tok / sec)
                rows.append((c, statistics.median(direct), statistics.median(via)))
        finally:
            server.stop()
            await engine.stop()
    print(f"\ntiny model, {args.max_tokens} new tokens per request, median of {args.repeats}")
    print(f"{'concurrency':>11} | {'direct tok/s':>12} | {'gRPC tok/s':>10} | {'gRPC/direct':>11}")
    print(f"{'-' * 11}-+-{'-' * 12}-+-{'-' * 10}-+-{'-' * 11}")
    for c, d, g in rows:
        print(f"{c:>11} | {d:>12.1f} | {g:>10.1f} | {g / d:>11.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--torch-threads", type=int, default=default_torch_threads())
    asyncio.run(main(parser.parse_args()))
