"""The trainer's forward on agent episodes, side by side in one run: logits at every
position vs at the trained tokens only (`trained_only`, timelines/logprobs.py), rows vs
tree-packed (`packing=true`), on SmolLM2-135M with LoRA.

The episodes are shaped like the TextWorld example's (examples/textworld, level 2, the
`text` agent; measured on its store: ~930 tokens a timeline, ~27 of them generated, a
~500-token first prompt shared by the 8 episodes of a GRPO group): `--tasks` groups of
8, 4 turns each (benchmarks/traces.py, random token ids: the cost does not depend on
them). Each mode runs in its own child process (so its peak RSS is its own): one
warm-up step, then `--steps` timed trainer steps through the trainer's own `StepRunner`
(built by `trainer.setup` as the server builds it). The loss is the same in every mode
(printed: the modes compute the same numbers at the trained tokens).

    python benchmarks/trainer_forward.py --tasks 1 --steps 1   # 7 minutes on 2 cores
    python benchmarks/trainer_forward.py --tasks 1 --steps 1 --modes all-rows,trained-rows
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from benchmarks import traces  # noqa: E402

MODES = {  # name: (logits at every position, packing)
    "all-rows": (True, False),
    "trained-rows": (False, False),
    "trained-packed": (False, True),
}

TEXTWORLD = traces.TraceShape(
    prompt_tokens=500, system_tokens=250, turns_min=4, turns_max=4, act_median=6,
    act_sigma=0.4, act_min=2, act_max=12, obs_median=100, obs_sigma=0.3, obs_min=60,
    obs_max=200, group_size=8, temperature=0.7,
)


def _episodes(vocab: int, tasks: int) -> list[Any]:
    from swarmrl_server.trainer.step import episode_rows
    from tests.trainer_support import make_episode

    out = []
    for i, ep in enumerate(traces.make_episodes(
            traces.with_overrides(TEXTWORLD, vocab=vocab), tasks, seed=0)):
        for call in ep.calls:
            call.model = "m"
        record = make_episode(ep.episode_id, float(i % 3) / 2, ep.calls, task_id=ep.task_id,
                              group_id=ep.task_id, models=["m"])
        out.append(episode_rows(record, "m", ep.task_id)[0])
    return out


def _every_position(forward: Any) -> Any:
    """The forward as it was before `trained_only`: logits at every position."""
    def run(model: Any, rows: Any, pad_id: int = 0, *, trained_only: bool = False,
            masks: Any = None) -> Any:
        return forward(model, rows, pad_id, masks=masks)
    return run


def _train(mode: str, path: str, tasks: int, steps: int, threads: int, out: Any) -> None:
    from swarmrl_server.trainer.config import TrainerConfig
    from swarmrl_server.trainer.device import Placement
    from swarmrl_server.trainer.setup import build_optimizer, build_policy
    from swarmrl_server.trainer.step import StepRunner, forward_for

    every, packing = MODES[mode]
    torch.set_num_threads(threads)
    config = TrainerConfig.from_options({
        "device": "cpu", "progress": "false", "lora_rank": "16", "lora_alpha": "32",
        "group_size": "8", "packing": str(packing).lower()})
    placement = Placement.for_option(config.device, bf16=config.bf16)
    policy = build_policy(Path(path), config, placement)
    optimizer = build_optimizer(policy.model, config)
    forward = forward_for(packing)
    runner = StepRunner(policy.model, optimizer, config, pad_id=policy.pad_id,
                        placement=placement, forward=_every_position(forward) if every else forward)
    batch = _episodes(policy.model.config.vocab_size, tasks)
    runner.run(batch)  # warm-up (allocates the AdamW state)
    times, losses = [], []
    for _ in range(steps):
        optimizer.param_groups[0]["lr"] = 0.0  # every mode and step sees the same weights
        t0 = time.perf_counter()
        stats = runner.run(batch)
        times.append(time.perf_counter() - t0)
        losses.append(stats.loss)
    out.put({"mode": mode, "step_s": statistics.median(times), "loss": losses[-1],
             "tokens": sum(e.num_tokens for e in batch),
             "trained": sum(e.num_generated for e in batch),
             "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2")
    p.add_argument("--tasks", type=int, default=2, help="GRPO groups of 8 in the batch")
    p.add_argument("--steps", type=int, default=1, help="timed steps per mode")
    p.add_argument("--threads", type=int, default=1, help="torch threads per mode")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated: " + ", ".join(MODES))
    args = p.parse_args(argv)
    from swarmrl_server.models import resolve_model

    path = str(resolve_model(args.model))
    ctx = mp.get_context("spawn")
    rows = []
    for mode in args.modes.split(","):
        queue = ctx.Queue()
        child = ctx.Process(target=_train,
                            args=(mode, path, args.tasks, args.steps, args.threads, queue))
        child.start()
        rows.append(queue.get())
        child.join()
        print(f"{mode:>15}: {rows[-1]['step_s']:7.1f} s/step  peak RSS "
              f"{rows[-1]['peak_rss_mb']:7.0f} MB  loss {rows[-1]['loss']:+.6f}", flush=True)
    base = rows[0]
    print(f"\n{base['tokens']} tokens in {args.tasks * 8} episodes, {base['trained']} trained; "
          f"{args.threads} thread(s)")
    for r in rows:
        print(f"{r['mode']:>15}: step time {r['step_s'] / base['step_s']:.2f}x, "
              f"peak RSS {r['peak_rss_mb'] / base['peak_rss_mb']:.2f}x of {base['mode']}")


if __name__ == "__main__":
    main()
