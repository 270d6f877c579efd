"""weight_sync=wait vs interrupt: sync latency, tokens/s and client stalls, side by side.

A scripted training run: `--clients` clients keep one call each running at all times
(long, uneven calls: max_tokens cycles through `--lengths`, temperature 1), while a
"trainer" pushes new weights every `--step-s` seconds (its step time), `--syncs` times.
Each engine (hf in process; vllm through a `vllm serve` launched from .venv-vllm) runs
both modes, alternated `--rounds` times, so machine noise hits both alike.

Reported per engine and mode:
  - sync latency p50 / p90: `update_weights` called (trainer step done) -> returned (the
    new version serving), and its parts (the engine's `last_sync`, means): write (vLLM:
    safetensors on disk), drain (wait: the calls in flight finish; interrupt: they stop
    at a token), reload, resume (new version serving -> the last interrupted call's
    first new token; after the sync returns, not part of the latency);
  - generation tokens/s over the run (tokens streamed between the first and last step);
  - steps/min: syncs per minute of run (the trainer waits for each push, then steps
    for `--step-s`: a slow push slows training);
  - blocked: seconds per sync that clients spent inside a sync window without a token
    (summed over clients: a call waiting to start, or stopped, counts; tokens arriving
    during the window end a gap).

    nice -n 19 .venv/bin/python benchmarks/weight_sync.py --engines hf,vllm
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from swarmrl_server.config import default_torch_threads  # noqa: E402
from swarmrl_server.engine.base import (  # noqa: E402
    Engine,
    GenerationChunk,
    SamplingParams,
    SyncTimes,
)
from swarmrl_server.models import load_model, resolve_model  # noqa: E402

MODES = ("wait", "interrupt")


@dataclass
class Run:
    """One mode's run on one engine."""

    latencies: list[float] = field(default_factory=list)
    parts: list[SyncTimes] = field(default_factory=list)
    tokens: int = 0
    seconds: float = 0.0
    blocked: float = 0.0
    syncs: int = 0


async def run_mode(engine: Engine, interrupt: bool, states: list[dict[str, torch.Tensor]],
                   version: int, args: argparse.Namespace, seed: int) -> tuple[Run, int]:
    lengths = [int(x) for x in args.lengths.split(",")]
    calls: list[list[float]] = []  # each call: submit, each chunk's arrival, its end
    tokens_at: list[tuple[float, int]] = []
    running: set[int] = set()

    async def client(slot: int) -> None:
        i = 0
        while True:
            n = lengths[(slot * 7 + i) % len(lengths)]
            params = SamplingParams(temperature=1.0, max_tokens=n, seed=seed + 1000 * slot + i)
            times = [time.perf_counter()]
            calls.append(times)
            running.add(id(times))
            async for item in engine.generate([5 + slot % 50, 17, 33, 101, 7, 250], params):
                now = time.perf_counter()
                if not isinstance(item, GenerationChunk):  # the output: the call is over
                    times.append(now)
                    running.discard(id(times))
                elif item.token_ids:
                    times.append(now)
                    tokens_at.append((now, len(item.token_ids)))
            i += 1

    tasks = [asyncio.create_task(client(s)) for s in range(args.clients)]
    run = Run()
    windows: list[tuple[float, float]] = []
    try:
        await asyncio.sleep(args.warmup_s)
        start = time.perf_counter()
        for k in range(args.syncs):
            await asyncio.sleep(args.step_s)  # the trainer's step
            if run.parts:  # the previous sync's resume is over by now
                run.parts[-1] = _copy(engine.last_sync)
            version += 1
            t0 = time.perf_counter()
            await engine.update_weights(states[k % 2], version, interrupt=interrupt)
            t1 = time.perf_counter()
            windows.append((t0, t1))
            run.latencies.append(t1 - t0)
            run.parts.append(SyncTimes())
        await asyncio.sleep(args.step_s)
        run.parts[-1] = _copy(engine.last_sync)
        end = time.perf_counter()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    run.seconds = end - start
    run.tokens = sum(n for t, n in tokens_at if start <= t <= end)
    run.syncs = len(windows)
    for times in calls:  # a call's gaps between events, inside a sync window
        for a, b in zip(times, [*times[1:], end] if id(times) in running else times[1:]):
            for w0, w1 in windows:
                run.blocked += max(0.0, min(b, w1) - max(a, w0))
    return run, version


def _copy(t: SyncTimes | None) -> SyncTimes:
    return SyncTimes(**vars(t)) if t is not None else SyncTimes()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def report(name: str, runs: dict[str, list[Run]]) -> None:
    print(f"\n{name}: {'mode':<10}{'sync p50':>9}{'p90':>7}{'write':>7}{'drain':>7}"
          f"{'reload':>7}{'resume':>7}{'tok/s':>8}{'blocked/sync':>13}{'interrupted':>12}"
          f"{'steps/min':>10}")
    stats: dict[str, tuple[float, float]] = {}
    for mode, rs in runs.items():
        lat = [x for r in rs for x in r.latencies]
        parts = [p for r in rs for p in r.parts]
        tok_s = sum(r.tokens for r in rs) / sum(r.seconds for r in rs)
        blocked = sum(r.blocked for r in rs) / sum(r.syncs for r in rs)

        def mean(attr: str, parts: list[SyncTimes] = parts) -> float:
            return statistics.fmean(getattr(p, attr) for p in parts)

        stats[mode] = (pct(lat, 0.5), tok_s)
        print(f"{'':<{len(name) + 2}}{mode:<10}{pct(lat, 0.5):>9.3f}{pct(lat, 0.9):>7.3f}"
              f"{mean('write_s'):>7.3f}{mean('drain_s'):>7.3f}{mean('reload_s'):>7.3f}"
              f"{mean('resume_s'):>7.3f}{tok_s:>8.0f}{blocked:>13.2f}{mean('interrupted'):>12.1f}"
              f"{60 * sum(r.syncs for r in rs) / sum(r.seconds for r in rs):>10.1f}")
    (w_lat, w_tok), (i_lat, i_tok) = stats["wait"], stats["interrupt"]
    print(f"{'':<{len(name) + 2}}interrupt/wait: sync p50 x{i_lat / w_lat:.2f}, "
          f"tokens/s x{i_tok / w_tok:.2f}")


async def bench(name: str, engine: Engine, states: list[dict[str, torch.Tensor]],
                args: argparse.Namespace) -> None:
    await engine.start()
    runs: dict[str, list[Run]] = {m: [] for m in MODES}
    version = 0
    try:
        for r in range(args.rounds):
            for mode in MODES if r % 2 == 0 else MODES[::-1]:
                run, version = await run_mode(engine, mode == "interrupt", states, version,
                                              args, seed=100 * r)
                runs[mode].append(run)
                print(f"  {name} round {r} {mode}: sync p50 {pct(run.latencies, 0.5):.3f} s, "
                      f"{run.tokens / run.seconds:.0f} tok/s", flush=True)
    finally:
        await engine.stop()
    report(name, runs)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny", help="tiny, smollm2 or a model directory")
    p.add_argument("--engines", default="hf,vllm")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--lengths", default="64,128,256,384,512,768,1024",
                   help="max_tokens of the calls, cycled (uneven on purpose)")
    p.add_argument("--syncs", type=int, default=6, help="weight pushes per run")
    p.add_argument("--step-s", type=float, default=2.0, help="seconds between pushes")
    p.add_argument("--warmup-s", type=float, default=2.0)
    p.add_argument("--rounds", type=int, default=2, help="runs of each mode, alternated")
    p.add_argument("--vllm-python", type=Path, default=REPO / ".venv-vllm" / "bin" / "python")
    args = p.parse_args()
    torch.set_num_threads(default_torch_threads())
    model_dir = resolve_model(args.model)
    model, _ = load_model(model_dir)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict({k: v + 1e-3 * torch.randn_like(v) for k, v in base.items()})
    states = [{k: v.clone() for k, v in model.state_dict().items()}, base]
    max_len = max(int(x) for x in args.lengths.split(",")) + 16
    print(f"model {args.model}, {args.clients} clients, max_tokens {args.lengths}, "
          f"{args.syncs} syncs every {args.step_s} s, {args.rounds} rounds per mode, "
          f"{torch.get_num_threads()} torch threads", flush=True)
    for name in args.engines.split(","):
        engine: Engine
        if name == "hf":
            from swarmrl_server.engine.hf.engine import HFEngine

            engine = HFEngine.from_pretrained("hf", model_dir, max_batch_size=args.clients)
        else:
            from swarmrl_server.engine.vllm.engine import VLLMEngine

            work = Path(tempfile.mkdtemp(prefix="weight-sync-"))
            engine = VLLMEngine("vllm", model_dir, python=args.vllm_python, log_dir=work,
                                weights_dir=work / "weights", max_model_len=max_len,
                                trainable=True)
        await bench(name, engine, states, args)


if __name__ == "__main__":
    asyncio.run(main())
