"""LoRA vs full fine-tuning of SmolLM2-135M, side by side in one run: trainer step time,
peak memory, what the optimizer holds, and the weight sync (seconds and bytes) to the hf
engine and to a real `vllm serve --enable-lora`.

- Training: each mode in its own child process (so its peak RSS is its own): the same
  batch of `--episodes` episodes of `--tokens` tokens, one warm-up step and `--steps` timed
  steps through the trainer's own `StepRunner` (built by `trainer.setup`, as the server
  builds it). Peak memory is the child's peak RSS on CPU (GPU: peak allocated).
- Sync: full = every weight (`Engine.update_weights`; on vLLM: write safetensors, pause,
  `reload_weights`, prefix-cache reset, resume); LoRA = the adapter alone (on hf: loaded
  between waves; on vLLM: written to a new directory and `POST /v1/load_lora_adapter`).
  One vLLM server (launched from .venv-vllm with --enable-lora) serves both. Median of
  `--syncs` syncs each.

    python benchmarks/lora_vs_full.py                  # SmolLM2, a few minutes on 2 cores
    python benchmarks/lora_vs_full.py --no-vllm --episodes 2 --tokens 128   # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from swarmrl_server.models import resolve_model  # noqa: E402

MODES = {"full": {}, "lora": {"lora_rank": "8", "lora_alpha": "16"}}


def _batch(vocab: int, episodes: int, tokens: int) -> list[Any]:
    from swarmrl_server.trainer.step import episode_rows
    from tests.trainer_support import make_call, make_episode

    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(episodes):
        ids = torch.randint(100, vocab - 1, (tokens,), generator=g).tolist()
        half = tokens // 2
        call = make_call(f"e{i}", 0, ids[:half], ids[half:], logprobs=[-8.0] * (tokens - half),
                         model="m")
        out.append(episode_rows(make_episode(f"e{i}", float(i % 2), [call], models=["m"]),
                                "m", "g")[0])
    return out


def _train(mode: str, path: str, episodes: int, tokens: int, steps: int, threads: int,
           out: Any) -> None:
    """In a child: build the trainer's model as the server does, time `steps` steps."""
    from swarmrl_server.trainer.config import TrainerConfig
    from swarmrl_server.trainer.device import Placement
    from swarmrl_server.trainer.setup import build_optimizer, build_policy
    from swarmrl_server.trainer.step import StepRunner

    torch.set_num_threads(threads)
    config = TrainerConfig.from_options({"device": "cpu", "progress": "false",
                                         "micro_batch_tokens": str(tokens * 2), **MODES[mode]})
    placement = Placement.for_option(config.device, bf16=config.bf16)
    policy = build_policy(Path(path), config, placement)
    optimizer = build_optimizer(policy.model, config)
    runner = StepRunner(policy.model, optimizer, config, pad_id=policy.pad_id,
                        placement=placement)
    batch = _batch(policy.model.config.vocab_size, episodes, tokens)
    runner.run(batch)  # warm-up (allocates the AdamW state)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        runner.run(batch)
        times.append(time.perf_counter() - t0)
    state_bytes = sum(t.numel() * t.element_size() for s in optimizer.state.values()
                      for t in s.values() if isinstance(t, torch.Tensor))
    trainable = sum(p.numel() for p in policy.model.parameters() if p.requires_grad)
    out.put({"step_s": statistics.median(times), "peak_mb": placement.peak_memory_mb(),
             "trainable": trainable, "optimizer_mb": state_bytes / 2**20})


def train_side_by_side(path: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    ctx = mp.get_context("spawn")
    results = {}
    for mode in MODES:
        q = ctx.Queue()
        p = ctx.Process(target=_train, args=(mode, str(path), args.episodes, args.tokens,
                                             args.steps, args.threads, q))
        p.start()
        results[mode] = q.get()
        p.join()
        print(f"trained {mode}: {results[mode]}", flush=True)
    return results


def _weights(path: Path) -> tuple[dict[str, torch.Tensor], Any]:
    """The full state dict, and a LoRA adapter of rank 8 with non-zero B (as after a step)."""
    from swarmrl_server.engine.adapter import Adapter
    from swarmrl_server.models import load_model
    from swarmrl_server.trainer import lora
    from swarmrl_server.trainer.config import TrainerConfig

    model, _ = load_model(path)
    full = {k: v.detach().clone() for k, v in model.state_dict().items()}
    config = TrainerConfig.from_options(MODES["lora"])
    wrapped = lora.wrap(model, config)
    with torch.no_grad():
        for n, p in wrapped.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 1e-3)
    spec = lora.spec_for(config)
    assert spec is not None
    return full, Adapter(spec, lora.adapter_tensors(wrapped))


async def _timed(push: Any, n: int) -> float:
    times = []
    for v in range(1, n + 1):
        t0 = time.perf_counter()
        await push(v)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def _both(engine: Any, full: dict[str, torch.Tensor], adapter: Any, key: str,
                n: int, results: dict[str, dict[str, float]]) -> None:
    """Times `n` full syncs, then `n` adapter loads, on one started engine; stops it."""
    from swarmrl_server.engine.adapter import AdapterEngine

    try:
        results["full"][key] = await _timed(lambda v: engine.update_weights(full, v), n)
        view = AdapterEngine("m", engine, adapter.spec, shared=[])
        results["lora"][key] = await _timed(
            lambda v: view.update_weights(adapter.tensors, v), n)
    finally:
        await engine.stop()


async def sync_side_by_side(path: Path, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    from swarmrl_server.engine.adapter import LoraSlots
    from swarmrl_server.engine.hf.engine import HFEngine

    full, adapter = _weights(path)
    results: dict[str, dict[str, float]] = {"full": {}, "lora": {}}
    results["full"]["sync_bytes"] = float(sum(t.numel() * t.element_size() for t in full.values()))
    results["lora"]["sync_bytes"] = float(adapter.nbytes)

    hf = HFEngine.from_pretrained("base", path)
    await hf.start()
    await _both(hf, full, adapter, "hf_sync_s", args.syncs, results)
    print(f"hf syncs: {results}", flush=True)
    if not args.vllm:
        return results
    from swarmrl_server.engine.vllm.engine import VLLMEngine

    with tempfile.TemporaryDirectory() as tmp:
        engine = VLLMEngine("base", path, log_dir=Path(tmp), weights_dir=Path(tmp) / "w",
                            max_model_len=512, trainable=True, lora=LoraSlots(1, 8))
        t0 = time.perf_counter()
        await engine.start()
        print(f"vllm serve --enable-lora healthy after {time.perf_counter() - t0:.0f} s",
              flush=True)
        await _both(engine, full, adapter, "vllm_sync_s", args.syncs, results)
    return results


def table(rows: dict[str, dict[str, float]]) -> str:
    labels = [("step_s", "trainer step (s)", "{:.2f}"), ("peak_mb", "peak memory (MB)", "{:.0f}"),
              ("trainable", "trained parameters", "{:,.0f}"),
              ("optimizer_mb", "AdamW state (MB)", "{:.1f}"),
              ("sync_bytes", "sync bytes (MB)", "{:.2f}"), ("hf_sync_s", "hf sync (s)", "{:.3f}"),
              ("vllm_sync_s", "vLLM sync (s)", "{:.3f}")]
    lines = [f"{'':<22}{'full':>14}{'LoRA r=8':>14}{'LoRA/full':>12}"]
    for key, label, fmt in labels:
        if key not in rows["full"]:
            continue
        f, lo = rows["full"][key], rows["lora"][key]
        if key == "sync_bytes":
            f, lo = f / 2**20, lo / 2**20
        lines.append(f"{label:<22}{fmt.format(f):>14}{fmt.format(lo):>14}"
                     f"{lo / f if f else float('nan'):>12.3f}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2", help="model spec (default smollm2)")
    p.add_argument("--episodes", type=int, default=2, help="episodes in the batch")
    p.add_argument("--tokens", type=int, default=256, help="tokens per episode")
    p.add_argument("--steps", type=int, default=1, help="timed steps after one warm-up")
    p.add_argument("--syncs", type=int, default=3, help="timed syncs per mode and engine")
    p.add_argument("--threads", type=int, default=2, help="torch threads of the trainer")
    p.add_argument("--no-vllm", dest="vllm", action="store_false", help="skip the vLLM sync")
    args = p.parse_args()
    path = resolve_model(args.model)
    t0 = time.perf_counter()
    rows = train_side_by_side(path, args)
    for mode, values in asyncio.run(sync_side_by_side(path, args)).items():
        rows[mode].update(values)
    print(f"\n{args.model}: {args.episodes} episodes x {args.tokens} tokens a step, "
          f"fp32 on {torch.get_num_threads()} threads ({time.perf_counter() - t0:.0f} s in all)")
    print(table(rows))


if __name__ == "__main__":
    main()
