"""GPU check: a few real training steps of a small model on CUDA, with what is installed.

Installs nothing and reaches no network. Needs torch (CUDA build) and transformers; uses
verl for the loss when it is installed (else a plain token-mean policy-gradient loss,
said so in the output), and the HF engine for the weight-sync timing (else a plain
state-dict copy into a second model, said so). vLLM and Ray are not needed.

Prints, for `--steps` steps on a synthetic batch of `--batch` episodes of mixed length:
step time, tokens/s and peak GPU memory (bf16 autocast, fp32 master weights and AdamW
state); the loss and per-token logprobs under bf16 autocast vs fp32 on the same batch;
and the time to push the trained weights to an engine.

    python benchmarks/gpu_check.py                      # smollm2 (or --model DIR) on CUDA
    python benchmarks/gpu_check.py --model tiny --cpu   # the same code on the CPU path

Without a GPU and without --cpu it stops at once with exit code 2 and says why.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "server"))

import torch  # noqa: E402


def _episodes(vocab: int, n: int, seed: int = 0) -> list[Any]:
    from swarmrl_server.store.records import CallRecord, EpisodeRecord, EpisodeState
    from swarmrl_server.trainer.step import episode_rows

    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = [rng.randrange(10, vocab) for _ in range(rng.choice([32, 64, 128]))]
        length = rng.choice([16, 64, 128, 256])
        completion = [rng.randrange(10, vocab) for _ in range(length)]
        call = CallRecord(
            call_id=f"c{i}", episode_id=f"e{i}", seq=0, model="m", prompt_ids=prompt,
            completion_ids=completion, logprobs=[-5.0] * length, policy_version=0,
            finish_reason="length", temperature=1.0, text="")
        record = EpisodeRecord(
            episode_id=f"e{i}", session_id="s", task_id="t", group_id=f"g{i // 4}",
            agent_version="", models=["m"], labels={}, state=EpisodeState.ENDED,
            start_time=0.0, reward=float(rng.random()), end_time=None, calls=[call])
        out.append(episode_rows(record, "m", f"g{i // 4}")[0])
    return out


def _plain_loss(model: Any, episodes: list[Any], pad: int) -> tuple[torch.Tensor, int]:
    """verl missing: token-mean policy gradient with group-mean baselines (for timing)."""
    from swarmrl_server.timelines.logprobs import forward_timelines
    from swarmrl_server.trainer.step import gather, generated_mask

    rewards = torch.tensor([e.reward for e in episodes])
    groups: dict[str, list[int]] = {}
    for i, e in enumerate(episodes):
        groups.setdefault(e.uid, []).append(i)
    adv = rewards.clone()
    for idx in groups.values():
        adv[idx] = rewards[idx] - rewards[idx].mean()
    mask = generated_mask(episodes)
    lp, _ = forward_timelines(model, [r for e in episodes for r in e.rows], pad)
    lp_E_L = gather(episodes, lp, mask.shape[1])
    return -(adv[:, None] * lp_E_L * mask).sum() / mask.sum(), int(mask.sum())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2", help="smollm2, tiny or an HF directory")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--micro-batch-tokens", type=int, default=8192)
    p.add_argument("--grad-checkpointing", action="store_true")
    p.add_argument("--cpu", action="store_true", help="run the CPU path (no GPU needed)")
    args = p.parse_args()

    if not args.cpu and not torch.cuda.is_available():
        print(f"gpu_check: torch {torch.__version__} sees no CUDA GPU "
              f"(cuda build: {torch.version.cuda or 'no'}); nothing was run. "
              "Run on a GPU machine, or pass --cpu for the CPU path.", file=sys.stderr)
        return 2
    from swarmrl_server.models import load_model, resolve_model
    from swarmrl_server.trainer.device import Placement, enable_gradient_checkpointing

    placement = Placement.for_option("cpu" if args.cpu else "cuda")
    dev = placement.device
    has_verl = importlib.util.find_spec("verl") is not None
    print(f"torch {torch.__version__}, device {dev}"
          + (f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else "")
          + f", verl {'yes' if has_verl else 'no (plain policy-gradient loss)'}", flush=True)

    path = resolve_model(args.model)
    model, tok = load_model(path)
    pad = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    model.to(dev)  # type: ignore[arg-type]
    if args.grad_checkpointing:
        enable_gradient_checkpointing(model)
    vocab = int(model.config.vocab_size)
    episodes = _episodes(vocab, args.batch)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model {args.model}: {n_params / 1e6:.1f}M params (fp32 master), batch "
          f"{len(episodes)} episodes, {sum(e.num_tokens for e in episodes)} tokens", flush=True)

    # bf16 autocast vs fp32: the same batch, no update.
    model.eval()
    from swarmrl_server.timelines.logprobs import forward_timelines

    rows = [r for e in episodes[:4] for r in e.rows]
    with torch.no_grad(), torch.device(dev):
        lp32, _ = forward_timelines(model, rows, pad)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            lp16, _ = forward_timelines(model, rows, pad)
    diffs = torch.cat([(a - b).abs() for a, b in zip(lp32, lp16)])
    sums32 = torch.stack([a.sum() for a in lp32])
    sums16 = torch.stack([b.sum() for b in lp16])
    print(f"bf16 vs fp32 logprobs: mean |diff| {float(diffs.mean()):.4f}, max {float(diffs.max()):.4f}; "
          f"sequence logprob rel diff {float(((sums32 - sums16).abs() / sums32.abs()).max()):.2e}")

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    times: list[float] = []
    tokens = 0
    if has_verl:
        from swarmrl_server.trainer.config import TrainerConfig
        from swarmrl_server.trainer.step import StepRunner

        config = TrainerConfig(group_size=4, micro_batch_tokens=args.micro_batch_tokens,
                               device=str(dev.type), lr=1e-6)
        runner = StepRunner(model, optimizer, config, pad_id=pad, placement=placement)
        losses = {}
        for bf16 in (False, True):  # the same first-step loss both ways, before any update
            runner.placement = Placement(dev, bf16=bf16)  # (bf16 autocast runs on CPUs too)
            with torch.no_grad(), runner.placement.step(), runner.placement.autocast():
                adv = runner.advantages(episodes[:4]).to(dev)
                from swarmrl_server.trainer import algorithms
                from swarmrl_server.trainer.step import generated_mask

                mask = generated_mask(episodes[:4])
                algorithms.set_global_batch(runner.actor_cfg, num_tokens=int(mask.sum()),
                                            num_episodes=4, loss_scale_factor=mask.shape[1])
                loss, _, _ = runner._micro_batch_loss(episodes[:4], adv, mask, mask.shape[1])
            losses[bf16] = float(loss)
        print(f"loss fp32 {losses[False]:.6f} vs bf16 autocast {losses[True]:.6f} "
              f"(|diff| {abs(losses[False] - losses[True]):.2e})")
        runner.placement = placement
        for _ in range(args.steps + 1):
            placement.synchronize()
            t0 = time.perf_counter()
            stats = runner.run(episodes)
            placement.synchronize()
            times.append(time.perf_counter() - t0)
            tokens = stats.tokens_forward
        peak = stats.peak_memory_mb
    else:
        model.train()
        for _ in range(args.steps + 1):
            placement.reset_peak()
            placement.synchronize()
            t0 = time.perf_counter()
            with placement.step(), placement.autocast():
                loss, _ = _plain_loss(model, episodes, pad)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            placement.synchronize()
            times.append(time.perf_counter() - t0)
            tokens = sum(e.num_tokens for e in episodes)
        peak = placement.peak_memory_mb()
    step = statistics.median(times[1:])  # the first step pays for kernels and allocation
    print(f"train step: {step:.3f}s median of {args.steps} (first {times[0]:.3f}s), "
          f"{tokens / step:,.0f} tokens/s, peak {'GPU memory' if dev.type == 'cuda' else 'RSS'} "
          f"{peak:,.0f} MiB")

    # Weight sync: the trained weights into a serving engine.
    state = {k: v.detach() for k, v in model.state_dict().items()}
    try:
        from swarmrl_server.engine.hf.engine import HFEngine

        engine = HFEngine.from_pretrained("m", path)
        engine.model.to(dev)
        how = "HF engine update_weights"

        async def push() -> float:
            t0 = time.perf_counter()
            await engine.update_weights(state, 1)
            placement.synchronize()
            return time.perf_counter() - t0

        sync_s = asyncio.run(push())
    except ImportError as exc:  # a bare machine without the server's gRPC deps
        other, _ = load_model(path)
        other.to(dev)  # type: ignore[arg-type]
        how = f"state-dict copy (HF engine unavailable: {exc.name})"
        t0 = time.perf_counter()
        other.load_state_dict(state, strict=False)
        placement.synchronize()
        sync_s = time.perf_counter() - t0
    mb = sum(v.numel() * v.element_size() for v in state.values()) / 2**20
    print(f"weight sync: {sync_s:.3f}s for {mb:,.0f} MiB ({how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
