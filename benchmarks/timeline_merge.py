"""Actor-update cost of an agent trace three ways: per-call rows, merged timelines, tree-packed.

On the same episodes and model, one actor update (forward + backward of the sum of
the generated tokens' logprobs) runs as
  per-call  every call its own row (prompt + completion), as without merging,
  merged    the timelines `merge_calls` makes (one row per timeline),
  tree      the timelines tree-packed by `plan_packing` (shared prefixes once).
Each repeat runs the methods back to back in a rotating order, so load from other
processes hits them alike; the table reports medians.

FLOP model (timelines/flops.py), forward + backward, per token:
    6 * (N_nonembedding + V * d)  +  12 * n_layers * d_attn * keys_attended
where keys_attended is the token's causal context (position + 1 in a row; ancestors
+ itself in a tree). "token limit" and "FLOP limit" are per-call tokens / FLOPs over
the method's: the speedup perfect hardware would give. "% of limit" = measured
speedup / FLOP limit.

Timing: CPU seconds of this process (`time.process_time`), median over repeats,
with torch on `--threads` threads (default 1). On a shared 2-core machine a second
thread mostly waits at barriers while another job holds the other core, and CPU time
of one thread is the work done no matter who else runs; wall seconds are shown too.

Examples:
    python benchmarks/timeline_merge.py --trace appworld
    python benchmarks/timeline_merge.py --trace forks --methods merged,tree
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks import traces  # noqa: E402
from swarmrl_server.timelines.flops import ModelShape  # noqa: E402
from swarmrl_server.timelines.logprobs import (  # noqa: E402
    forward_packed,
    forward_timelines,
    packing_kinds,
)
from swarmrl_server.timelines.merge import MergeStats, Timeline, merge_calls  # noqa: E402
from swarmrl_server.timelines.pack import PackPlan, plan_packing  # noqa: E402

METHODS = ("per-call", "merged", "tree")


@dataclass
class Workload:
    """One method's work: units, each one forward + backward (graphs never span units)."""

    name: str
    units: list[Callable[[torch.nn.Module], torch.Tensor]]
    rows: int
    tokens: int
    flops: float


def _loss(logprobs: Sequence[torch.Tensor], rows: Sequence[Timeline]) -> torch.Tensor:
    """Sum of the generated tokens' logprobs (the policy-gradient loss with advantage 1)."""
    total = torch.zeros(())
    for lp, t in zip(logprobs, rows):
        total = total + (lp * torch.tensor(t.loss_mask[1:], dtype=lp.dtype)).sum()
    return total


def _rows_unit(rows: list[Timeline]) -> Callable[[torch.nn.Module], torch.Tensor]:
    return lambda model: _loss(forward_timelines(model, rows)[0], rows)


def _plan_unit(plan: PackPlan) -> Callable[[torch.nn.Module], torch.Tensor]:
    return lambda model: _loss(forward_packed(model, plan)[0], plan.timelines)


def build_workloads(
    episodes: Sequence[traces.Episode], shape: ModelShape, kinds: Sequence[str], overhead: float
) -> tuple[dict[str, Workload], MergeStats]:
    stats = MergeStats()
    per_call: list[Timeline] = []
    merged: list[Timeline] = []
    task_of: dict[str, str] = {}
    for ep in episodes:
        for call in ep.calls:
            per_call.extend(merge_calls([call])[0])
        timelines, ep_stats = merge_calls(ep.calls)
        stats.add(ep_stats)
        merged.extend(timelines)
        task_of[ep.episode_id] = ep.task_id
    # One prefix tree per GRPO group (task): its episodes share the task prompt.
    plan = plan_packing(
        merged, shape, group_key=lambda t: task_of[t.episode_id], kinds=kinds,
        segment_overhead_tokens=overhead, stats=stats,
    )
    work = {
        "per-call": Workload(
            "per-call", [_rows_unit([t]) for t in per_call], len(per_call),
            sum(map(len, per_call)), sum(shape.row_flops(len(t)) for t in per_call),
        ),
        "merged": Workload(
            "merged", [_rows_unit([t]) for t in merged], len(merged),
            sum(map(len, merged)), sum(shape.row_flops(len(t)) for t in merged),
        ),
        "tree": Workload(
            "tree", [_plan_unit(p) for p in plan.split()], plan.rows, plan.tokens, plan.flops,
        ),
    }
    return work, stats


def load_config(spec: str) -> Any:
    from transformers import AutoConfig

    from swarmrl_server.models import resolve_model

    return AutoConfig.from_pretrained(resolve_model(spec), local_files_only=True)


def make_model(spec: str, config: Any, max_len: int, seed: int) -> torch.nn.Module:
    """The tiny model (or a local checkpoint) with room for `max_len` positions."""
    from transformers import AutoModelForCausalLM

    from swarmrl_server.models import resolve_model

    # RoPE has no learned positions: raising the limit changes no weight.
    config.max_position_embeddings = max(config.max_position_embeddings, max_len + 1)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_pretrained(
        resolve_model(spec), config=config, dtype=torch.float32, local_files_only=True
    ).train()


def run_once(model: torch.nn.Module, work: Workload, bar: object) -> tuple[float, float, float]:
    """One actor update; returns (cpu s, wall s, loss)."""
    model.zero_grad(set_to_none=True)
    loss_sum = 0.0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for unit in work.units:
        loss = unit(model)
        loss.backward()
        loss_sum += float(loss.detach())
        bar.update(1)  # type: ignore[attr-defined]
    return time.process_time() - cpu0, time.perf_counter() - wall0, loss_sum


def _grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten().double() for p in model.parameters() if p.grad is not None])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--trace", choices=("appworld", "forks"), default="appworld",
                   help="preset: linear AppWorld episodes, or the fork-heavy variant")
    p.add_argument("--tasks", type=int, default=1, help="tasks (x group size = episodes)")
    p.add_argument("--seed", type=int, default=0)
    for field in traces.TraceShape.__dataclass_fields__.values():
        if field.name != "vocab":
            p.add_argument(f"--{field.name.replace('_', '-')}", type=type(field.default),
                           default=None, help=f"trace shape (preset default: {field.default})")
    p.add_argument("--model", default="tiny", help="model spec (default: the tiny model)")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats (median reported)")
    p.add_argument("--per-call-repeats", type=int, default=1,
                   help="repeats for the slow per-call method (default 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--overhead-tokens", type=float, default=64.0,
                   help="planner: cost of one extra forward call, in tokens")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    from tqdm import tqdm

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not set(methods) <= set(METHODS):
        raise SystemExit(f"--methods: choose from {', '.join(METHODS)}")
    preset = traces.appworld() if args.trace == "appworld" else traces.fork_heavy()
    fields = [f for f in traces.TraceShape.__dataclass_fields__ if f != "vocab"]
    overrides = {f: getattr(args, f) for f in fields}
    config = load_config(args.model)
    shape_t = traces.with_overrides(preset, vocab=int(config.vocab_size), **overrides)
    episodes = traces.make_episodes(shape_t, args.tasks, args.seed)
    max_len = max(len(c.prompt_ids) + len(c.completion_ids) for e in episodes for c in e.calls)
    model = make_model(args.model, config, max_len, args.seed)
    shape = ModelShape.from_model(model)
    work, stats = build_workloads(episodes, shape, packing_kinds(model), args.overhead_tokens)

    reps = {m: args.per_call_repeats if m == "per-call" else args.repeats for m in methods}
    total_units = sum(len(work[m].units) * reps[m] for m in methods)
    bar = tqdm(total=total_units, disable=args.no_progress, desc="forward+backward", unit="row")
    cpu: dict[str, list[float]] = {m: [] for m in methods}
    wall: dict[str, list[float]] = {m: [] for m in methods}
    losses: dict[str, float] = {}
    grads: dict[str, torch.Tensor] = {}
    for r in range(max(reps.values())):
        order = methods[r % len(methods):] + methods[: r % len(methods)]
        for m in order:
            if len(cpu[m]) >= reps[m]:
                continue
            c, w, loss = run_once(model, work[m], bar)
            cpu[m].append(c)
            wall[m].append(w)
            if m not in grads:
                losses[m], grads[m] = loss, _grad(model)
    bar.close()
    print_report(args, shape_t, episodes, stats, shape, work, methods, cpu, wall, losses, grads)


def print_report(
    args: argparse.Namespace, shape_t: traces.TraceShape, episodes: Sequence[traces.Episode],
    stats: MergeStats, shape: ModelShape, work: dict[str, Workload], methods: Sequence[str],
    cpu: dict[str, list[float]], wall: dict[str, list[float]], losses: dict[str, float],
    grads: dict[str, torch.Tensor],
) -> None:
    turns = [sum(1 for c in e.calls) for e in episodes]
    longest = max(len(c.prompt_ids) + len(c.completion_ids) for e in episodes for c in e.calls)
    print(f"\ntrace {args.trace}: {len(episodes)} episode(s) of {args.tasks} task(s), "
          f"{stats.calls} calls ({min(turns)}-{max(turns)} per episode), longest call "
          f"{longest} tokens; seed {args.seed}")
    print(f"shape: prompt {shape_t.prompt_tokens}, turns {shape_t.turns_min}-{shape_t.turns_max}, "
          f"action lognormal(median {shape_t.act_median:g}, sigma {shape_t.act_sigma:g}), "
          f"observation lognormal(median {shape_t.obs_median:g}, sigma {shape_t.obs_sigma:g}), "
          f"compact every {shape_t.compact_every or '-'}, retry p {shape_t.retry_p:g}, "
          f"group {shape_t.group_size}")
    print(f"model {args.model}: {shape.n_layers} layers, d={shape.hidden}, "
          f"{shape.non_embedding_params / 1e6:.2f}M non-embedding params, vocab {shape.vocab}; "
          f"torch threads {args.threads}")
    kinds = Counter(stats.fork_kinds)
    print(f"merge: {stats.timelines} timelines, {stats.forks} forks "
          f"({', '.join(f'{k} {n}' for k, n in sorted(kinds.items())) or 'none'})"
          + (f", fork position median {statistics.median(stats.fork_positions):.0f}"
             if stats.fork_positions else ""))
    base = work["per-call"]
    ref = "per-call" if "per-call" in methods else None
    head = (f"{'method':<9} {'rows':>5} {'tokens':>9} {'TFLOP':>7} {'cpu s':>8} {'wall s':>8} "
            f"{'speedup':>8} {'token lim':>9} {'FLOP lim':>8} {'% of lim':>8} {'grad cos':>9}")
    print("\n" + head + "\n" + "-" * len(head))
    med = {m: statistics.median(cpu[m]) for m in methods}
    for m in METHODS:
        w = work[m]
        tok_lim, flop_lim = base.tokens / w.tokens, base.flops / w.flops
        timed = m in methods
        speed = med["per-call"] / med[m] if timed and ref else None
        cos = (float(torch.nn.functional.cosine_similarity(grads[m], grads[ref], 0))
               if timed and ref else None)
        print(f"{m:<9} {w.rows:>5} {w.tokens:>9,} {w.flops / 1e12:>7.2f} "
              f"{_fmt(med.get(m), '8.1f')} "
              f"{_fmt(statistics.median(wall[m]) if timed else None, '8.1f')} "
              f"{_fmt(speed, '7.2f')}{'x' if speed else ' '} {tok_lim:>8.2f}x {flop_lim:>7.2f}x "
              f"{_fmt(speed / flop_lim * 100 if speed else None, '7.0f')}{'%' if speed else ' '} "
              f"{_fmt(cos, '9.6f')}")
    if "merged" in methods and "tree" in methods:
        m, t = work["merged"], work["tree"]
        speed = med["merged"] / med["tree"]
        lim = m.flops / t.flops
        wall_speed = statistics.median(wall["merged"]) / statistics.median(wall["tree"])
        print(f"\ntree / merged: speedup {speed:.2f}x (cpu), {wall_speed:.2f}x (wall); "
              f"token limit {m.tokens / t.tokens:.2f}x, FLOP limit {lim:.2f}x, "
              f"{speed / lim * 100:.0f}% of the FLOP limit")
    print("repeats (cpu s): " + "; ".join(
        f"{m} " + ", ".join(f"{x:.1f}" for x in cpu[m]) for m in methods))
    print("loss (sum of generated logprobs): " + ", ".join(f"{m} {losses[m]:.4f}" for m in methods))


def _fmt(value: float | None, spec: str) -> str:
    width = int(spec.split(".")[0])
    return f"{value:{spec}}" if value is not None else f"{'-':>{width}}"


if __name__ == "__main__":
    main()
