"""Scale-out through Ray: episodes/s for 1 vs 2 engine replicas, trainer step time for 1 vs
2 FSDP2 trainer workers, side by side in one run.

- Replicas: `--episodes` two-turn episodes (the second call extends the first, as an agent
  does), `--concurrency` at a time, through the same `Router` the server uses, over N
  replica actors (Ray restarts, stickiness and all). Episodes/s and calls/s.
- Trainer workers: the same batch of `--batch` episodes of very different lengths (tree
  packing on), `--steps` timed steps after one warm-up, through `scale.workers.RayGroup` with N
  FSDP2 workers (gloo on CPU, NCCL with `--device cuda`). Median step time.

On the 2-core project machine every actor runs torch on one thread, so a second replica
or worker can use the second core and no more (the driver and Ray share them too): the
numbers show the machinery works and what it costs, not the speed-up a cluster gives. On a cluster pass `--ray-address`
(and `--device cuda --worker-gpus 1 --replica-gpus 1` on GPU nodes).

    python benchmarks/scale_out.py                     # local Ray cluster, tiny model
    python benchmarks/scale_out.py --ray-address auto --model smollm2 --device cuda \\
        --worker-gpus 1 --replica-gpus 1 --episodes 256 --batch 64
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from swarmrl_server.engine.base import GenerationOutput, SamplingParams  # noqa: E402
from swarmrl_server.models import resolve_model  # noqa: E402


async def _episode(router: Any, key: str, tokens: int, rng: random.Random) -> int:
    prompt = [rng.randrange(100, 1000) for _ in range(16)]
    calls = 0
    for _turn in range(2):
        out = None
        async for item in router.generate(prompt, SamplingParams(
                max_tokens=tokens, temperature=1.0, seed=rng.randrange(1 << 30),
                affinity_key=key)):
            out = item
        assert isinstance(out, GenerationOutput)
        prompt = prompt + out.completion_ids + [rng.randrange(100, 1000) for _ in range(4)]
        calls += 1
    return calls


async def replicas_run(path: Path, n: int, args: argparse.Namespace) -> dict[str, float]:
    from swarmrl_server.engine.registry import EngineOptions, Resources, engine_kind
    from swarmrl_server.scale.replicas import start_replicas

    kind = dataclasses.replace(
        engine_kind("hf"), resources=Resources(cpus=args.replica_cpus, gpus=args.replica_gpus))
    options = EngineOptions(name="bench", path=path, max_batch_size=32)
    router = start_replicas(kind, options, n, torch_threads=1)
    await router.start()
    try:
        rng = random.Random(0)
        sem = asyncio.Semaphore(args.concurrency)

        async def one(i: int) -> int:
            async with sem:
                return await _episode(router, f"ep-{n}-{i}", args.max_tokens, rng)

        await asyncio.gather(*(one(-1 - i) for i in range(min(4, args.episodes))))  # warm-up
        t0 = time.perf_counter()
        calls = sum(await asyncio.gather(*(one(i) for i in range(args.episodes))))
        dt = time.perf_counter() - t0
        spread = router.keys_per_replica()
    finally:
        await router.stop()
        import ray

        for r in router.replicas:
            ray.kill(r.actor)  # type: ignore[attr-defined]
    return {"episodes_per_s": args.episodes / dt, "calls_per_s": calls / dt,
            "seconds": dt, "spread": float(min(spread) / max(max(spread), 1))}


def _batch(path: Path, n: int) -> list[Any]:
    from swarmrl_server.store.records import CallRecord, EpisodeRecord, EpisodeState
    from swarmrl_server.trainer.step import episode_rows

    rng = random.Random(1)
    prompt = [1, 873, 198, 1100, 1200, 30, 2, 198, 1, 1300, 198]
    out = []
    for i in range(n):
        length = rng.choice([4, 8, 16, 48, 96])
        completion = [rng.randrange(500, 1500) for _ in range(length - 1)] + [2]
        call = CallRecord(
            call_id=f"c{i}", episode_id=f"e{i}", seq=0, model="bench", prompt_ids=prompt,
            completion_ids=completion, logprobs=[-2.0] * length, policy_version=0,
            finish_reason="stop", temperature=1.0, text="")
        record = EpisodeRecord(
            episode_id=f"e{i}", session_id="s", task_id="t", group_id=f"g{i // 4}",
            agent_version="", models=["bench"], labels={}, state=EpisodeState.ENDED,
            start_time=0.0, reward=float(rng.random()), end_time=None, calls=[call])
        out.append(episode_rows(record, "bench", f"g{i // 4}")[0])
    return out


def workers_run(path: Path, n: int, args: argparse.Namespace) -> dict[str, float]:
    from swarmrl_server.scale.workers import RayGroup
    from swarmrl_server.trainer.config import TrainerConfig
    from swarmrl_server.trainer.step import batch_advantages

    config = TrainerConfig.from_options({
        "workers": str(n), "worker_cpus": str(args.worker_cpus),
        "worker_gpus": str(args.worker_gpus), "device": args.device, "packing": "true",
        "group_size": "4", "micro_batch_tokens": "1024", "lr": "1e-5"})
    group = RayGroup(path, config)
    try:
        episodes = _batch(path, args.batch)
        adv = batch_advantages(episodes, config)
        group.step(episodes, adv)  # warm-up
        times, tokens = [], 0
        for _ in range(args.steps):
            t0 = time.perf_counter()
            stats = group.step(episodes, adv)
            times.append(time.perf_counter() - t0)
            tokens = stats.tokens_forward
    finally:
        group.close()
    step = statistics.median(times)
    return {"step_s": step, "tokens_per_s": tokens / step}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ray-address", help="existing Ray cluster (default: start a local one)")
    p.add_argument("--model", default="tiny", help="tiny, smollm2 or an HF directory")
    p.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--episodes", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--batch", type=int, default=16, help="episodes per trainer step")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cpu", help="trainer device: cpu, cuda, auto")
    p.add_argument("--replica-cpus", type=float, default=1.0)
    p.add_argument("--replica-gpus", type=float, default=0.0)
    p.add_argument("--worker-cpus", type=float, default=1.0)
    p.add_argument("--worker-gpus", type=float, default=0.0)
    args = p.parse_args()

    import os

    from swarmrl_server.scale.cluster import init_ray

    os.environ.setdefault("PYTHONPATH", os.pathsep.join(
        [str(REPO), str(REPO / "server"), str(REPO / "sdk_python")]))
    path = resolve_model(args.model)
    need = max(max(args.replicas) * args.replica_cpus, max(args.workers) * args.worker_cpus)
    t0 = time.perf_counter()
    init_ray(args.ray_address, logical_cpus=need)
    print(f"ray up in {time.perf_counter() - t0:.1f}s; cpus on this machine: {os.cpu_count()}",
          flush=True)
    rep = {n: asyncio.run(replicas_run(path, n, args)) for n in args.replicas}
    wrk = {n: workers_run(path, n, args) for n in args.workers}

    base_r, base_w = rep[args.replicas[0]], wrk[args.workers[0]]
    print(f"\nengine replicas ({args.episodes} two-turn episodes, {args.concurrency} at a time, "
          f"{args.max_tokens} tokens per call, model {args.model})")
    print(f"{'replicas':>9} {'episodes/s':>11} {'calls/s':>9} {'vs first':>9} {'balance':>8}")
    for n, r in rep.items():
        print(f"{n:>9} {r['episodes_per_s']:>11.2f} {r['calls_per_s']:>9.2f} "
              f"{r['episodes_per_s'] / base_r['episodes_per_s']:>8.2f}x {r['spread']:>8.2f}")
    print(f"\ntrainer workers (FSDP2, {args.batch} episodes per step, device {args.device}, "
          f"median of {args.steps} steps)")
    print(f"{'workers':>9} {'step s':>9} {'tokens/s':>9} {'vs first':>9}")
    for n, w in wrk.items():
        print(f"{n:>9} {w['step_s']:>9.3f} {w['tokens_per_s']:>9.0f} "
              f"{base_w['step_s'] / w['step_s']:>8.2f}x")
    if (os.cpu_count() or 1) <= 2 and not args.ray_address:
        print("\nnote: this machine has 2 cores. Every actor runs torch on 1 thread, so a "
              "second replica or worker can use the second core, and no more: the driver, "
              "the router and Ray share the same cores. These figures show that the placement "
              "works and what it costs, not what a cluster gives.")


if __name__ == "__main__":
    main()
