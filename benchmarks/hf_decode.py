"""HFEngine's decode step: transformers' defaults vs the engine's attention and cache.

One decode step of `--batch` left-padded rows over T cached positions, three ways, in
one run and interleaved (`--repeats` rounds), so machine noise hits all alike:
  - `sdpa`: transformers' `sdpa` attention and `DynamicCache` (what a plain model does);
  - `+gqa`: the engine's attention (`engine.hf.attention`: grouped kv heads read in
    place instead of expanded per query head);
  - `+gqa+grow`: also the engine's cache (`engine.hf.batch.GrowingLayer`: appends in
    place instead of `torch.cat`).
Each variant's logits are checked against `sdpa`'s (max abs difference printed).

    nice -n 19 .venv/bin/python benchmarks/hf_decode.py --model smollm2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from swarmrl_server.config import default_torch_threads  # noqa: E402
from swarmrl_server.engine.hf.attention import use_gqa_sdpa  # noqa: E402
from swarmrl_server.engine.hf.batch import new_cache  # noqa: E402
from swarmrl_server.models import load_model, resolve_model  # noqa: E402

VARIANTS = ("sdpa", "+gqa", "+gqa+grow")


@torch.inference_mode()
def decode_steps(model: Any, cache: Any, B: int, T: int, steps: int) -> tuple[float, torch.Tensor]:
    """Prefills B rows of T tokens (half of them left-padded to T/2 real tokens), then
    times `steps` decode steps; returns seconds per step and the last logits."""
    gen = torch.Generator().manual_seed(0)
    ids_B_T = torch.randint(3, 200, (B, T), generator=gen)
    mask_B_T = torch.ones_like(ids_B_T)
    mask_B_T[: B // 2, : T // 2] = 0
    pos_B_T = (mask_B_T.cumsum(-1) - 1).clamp(min=0)
    model(input_ids=ids_B_T, attention_mask=mask_B_T, position_ids=pos_B_T,
          past_key_values=cache, use_cache=True, logits_to_keep=1)
    next_B = mask_B_T.sum(-1)
    tokens_B = torch.randint(3, 200, (B,), generator=gen)
    t0 = time.perf_counter()
    for k in range(steps):
        mask_B_T = torch.cat([mask_B_T, mask_B_T.new_ones((B, 1))], -1)
        logits = model(input_ids=tokens_B[:, None], attention_mask=mask_B_T,
                       position_ids=(next_B + k)[:, None], past_key_values=cache,
                       use_cache=True).logits[:, -1].float()
    return (time.perf_counter() - t0) / steps, logits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny", help="tiny, smollm2 or a model directory")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lengths", default="256,1024", help="cached positions T, comma-separated")
    p.add_argument("--steps", type=int, default=16, help="decode steps timed per measurement")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    args = p.parse_args()
    torch.set_num_threads(default_torch_threads())
    from transformers import DynamicCache

    plain, _ = load_model(resolve_model(args.model))
    gqa, _ = load_model(resolve_model(args.model))
    if not use_gqa_sdpa(gqa):
        print(f"{args.model} has no grouped kv heads: +gqa is the same as sdpa")
    models = {"sdpa": plain.eval(), "+gqa": gqa.eval(), "+gqa+grow": gqa}
    print(f"model {args.model}, batch {args.batch}, {args.steps} decode steps, "
          f"{torch.get_num_threads()} torch threads")
    print(f"{'T':>6}" + "".join(f"{v + ' ms':>14}" for v in VARIANTS)
          + f"{'sdpa/+gqa':>11}{'sdpa/+grow':>12}{'max |diff|':>12}")
    for T in (int(x) for x in args.lengths.split(",")):
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        logits: dict[str, torch.Tensor] = {}
        for _ in range(args.repeats):
            for v in VARIANTS:
                cache = new_cache(gqa) if v == "+gqa+grow" else DynamicCache(config=plain.config)
                dt, logits[v] = decode_steps(models[v], cache, args.batch, T, args.steps)
                times[v].append(dt)
        ms = {v: 1000 * statistics.median(ts) for v, ts in times.items()}
        diff = max(float((logits[v] - logits["sdpa"]).abs().max()) for v in VARIANTS)
        print(f"{T:>6}" + "".join(f"{ms[v]:>14.1f}" for v in VARIANTS)
              + f"{ms['sdpa'] / ms['+gqa']:>11.2f}{ms['sdpa'] / ms['+gqa+grow']:>12.2f}"
              + f"{diff:>12.1e}", flush=True)


if __name__ == "__main__":
    main()
