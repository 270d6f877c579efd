"""The swarmrl demo: a tiny model learns a multi-turn fruit quiz by RL, on CPU, in minutes.

    python -m examples.demo                # or: make demo
    python -m examples.demo --seed 1 --rl-minutes 5 --out runs/demo-s1

What it does:

1. Builds the tiny random Qwen2-style model (``tiny:SEED``, ~3.7M parameters).
2. **Warm start (supervised).** Trains it briefly on synthetic quiz conversations
   whose answers are *random* fruits, mixed with "Say <word>." → "<word>" pairs: it
   learns the format (answer with one fruit) and to read the question, but no fruit
   fact, so it starts RL at chance level (reward ~0.25). Without the repetitions, a
   model this small learns from random answers to ignore the question entirely, and
   RL must first rebuild that path (many times slower).
3. Starts ``swarmrl serve --train`` on that model (GRPO, verl's PPO-clip loss,
   asynchronous: generation keeps running while the trainer steps).
4. Starts ``--clients`` agent processes (examples/fruit_quiz/agent.py) that play
   ``--rl-episodes`` episodes in groups through the Python SDK (or stop at
   ``--rl-minutes``, whichever comes first). A run is bounded by episodes rather than
   time so that its fifths mean the same on a fast machine and on a busy one.
5. Stops everything, writes ``<out>/reward.png`` (reward per episode over time),
   TensorBoard logs (``<out>/data/tb``), ``<out>/summary.json``, and prints the mean
   reward of the first and the last fifth of the episodes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

# Trainer settings for the demo (`--train-option`), tuned for a 2-core CPU.
TRAIN_OPTIONS = {
    "adv_estimator": "grpo",
    "policy_loss": "vanilla",
    "batch_rule": "groups",
    "mode": "async",
    "max_staleness": "4",
    "checkpoint_every": "0",
    "progress": "false",
}


def warm_start(args: argparse.Namespace, out: Path) -> Path:
    """The tiny model after the supervised format-only phase (cached per seed and steps)."""
    import torch

    from examples.fruit_quiz.task import warm_start_conversation
    from swarmrl_server.models import resolve_model
    from swarmrl_server.trainer.sft import SFTConfig, train_sft

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    cache = Path(args.cache_dir) if args.cache_dir else None
    base = resolve_model(f"tiny:{args.seed}", cache)
    target = out / f"sft-tiny{args.seed}-{args.sft_steps}"
    if (target / "model.safetensors").is_file():
        print(f"[demo] reusing the warm-started model in {target}", flush=True)
        return target
    print(f"[demo] supervised warm start: {args.sft_steps} steps on quiz conversations with "
          "random answers and 'Say <word>.' repetitions (the format, not the facts)", flush=True)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    train_sft(base, tmp, warm_start_conversation,
              SFTConfig(steps=args.sft_steps, batch_size=16, lr=1e-3, seed=args.seed),
              log=lambda line: print(f"[demo] {line}", flush=True))
    tmp.rename(target)
    return target


def start_server(args: argparse.Namespace, model_dir: Path, data_dir: Path, port: int,
                 log_path: Path) -> subprocess.Popen[bytes]:
    options = {
        **TRAIN_OPTIONS, "lr": str(args.lr), "group_size": str(args.group_size),
        "batch_size": str(args.batch_groups), "seed": str(args.seed),
        # Back-pressure: generation pauses while more than two batches wait for the trainer.
        "max_pending": str(2 * args.batch_groups * args.group_size),
    }
    cmd = [sys.executable, "-m", "swarmrl_server.cli", "--model", f"quiz={model_dir}",
           "--port", str(port), "--http-port", "-1", "--data-dir", str(data_dir), "--train",
           "--max-batch-size", "64", "--engine", args.engine]
    for key, value in options.items():
        cmd += ["--train-option", f"{key}={value}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"]}
    proc = subprocess.Popen(cmd, stdout=open(log_path, "ab"), stderr=subprocess.STDOUT,
                            cwd=REPO, env=env)
    marker = f"serving gRPC on 127.0.0.1:{port}"
    # A launched vLLM server takes 1-2 minutes to start on a busy 2-core CPU.
    deadline = time.monotonic() + (600 if args.engine == "vllm" else 300)
    while marker not in log_path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"the server did not start; see {log_path}:\n"
                             + log_path.read_text(errors="replace")[-3000:])
        time.sleep(0.2)
    return proc


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written right now
            pass
    return out


def episodes_of(client_dir: Path) -> list[dict[str, Any]]:
    rows = [r for p in sorted(client_dir.glob("*.jsonl")) for r in read_jsonl(p)]
    return sorted((r for r in rows if "reward" in r), key=lambda r: r["time"])


def fifths(rewards: list[float]) -> tuple[float, float]:
    n = max(len(rewards) // 5, 1)
    return sum(rewards[:n]) / n, sum(rewards[-n:]) / n


def plot(episodes: list[dict[str, Any]], steps: list[dict[str, Any]], path: Path,
         title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import random

    import matplotlib.pyplot as plt

    t0 = episodes[0]["time"]
    minutes = [(e["time"] - t0) / 60 for e in episodes]
    rewards = [e["reward"] for e in episodes]
    window = max(len(rewards) // 25, 16)
    rolling = [sum(rewards[max(0, i - window + 1): i + 1]) / (i + 1 - max(0, i - window + 1))
               for i in range(len(rewards))]
    skip = min(window // 4, len(rewards) - 1)  # the first few means are of very few episodes
    jitter = random.Random(0)
    n = max(len(rewards) // 5, 1)
    first, last = fifths(rewards)
    fig, ax = plt.subplots(figsize=(9, 5))
    ax.scatter(minutes, [r + jitter.uniform(-0.02, 0.02) for r in rewards], s=3, alpha=0.1,
               color="tab:blue", label="episode reward")
    ax.plot(minutes[skip:], rolling[skip:], color="tab:blue", lw=2,
            label=f"rolling mean ({window} episodes)")
    ax.axvspan(minutes[0], minutes[n - 1], color="tab:orange", alpha=0.12,
               label=f"first fifth: mean {first:.3f}")
    ax.axvspan(minutes[-n], minutes[-1], color="tab:green", alpha=0.12,
               label=f"last fifth: mean {last:.3f}")
    ax.axhline(0.25, color="gray", ls="--", lw=1, label="chance (random answers)")
    if steps:
        ax2 = ax.twinx()
        ax2.plot([(s["time"] - t0) / 60 for s in steps],
                 [s.get("actor/policy_version", 0) for s in steps], color="tab:red", lw=1,
                 alpha=0.6)
        ax2.set_ylabel("policy version", color="tab:red")
    ax.set_xlabel("minutes")
    ax.set_ylabel("reward (fraction of correct answers)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Train a tiny model on a multi-turn quiz; the reward rises.")
    # -- run
    p.add_argument("--out", default="runs/demo", help="output folder (PNG, logs, TensorBoard)")
    p.add_argument("--seed", type=int, default=0, help="model init, warm start, clients, trainer")
    p.add_argument("--rl-episodes", type=int, default=4800,
                   help="episodes the clients play in all (whole groups)")
    p.add_argument("--rl-minutes", type=float, default=7.0,
                   help="time limit of the RL phase (the run stops at whichever comes first)")
    p.add_argument("--cache-dir", help="model cache (default $SWARMRL_CACHE or ~/.cache/swarmrl)")
    # -- warm start
    p.add_argument("--sft-steps", type=int, default=100, help="supervised format-only steps")
    # -- RL
    p.add_argument("--clients", type=int, default=3, help="agent processes")
    p.add_argument("--group-size", type=int, default=8, help="episodes per group (GRPO)")
    p.add_argument("--batch-groups", type=int, default=3, help="groups per training batch")
    p.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--engine", choices=("hf", "vllm"), default="hf",
                   help="the server's engine (vllm: launches `vllm serve` from .venv-vllm)")
    args = p.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # One torch thread per process: the machine has 2 cores shared by the server's engine
    # and trainer threads (and often other work). With 2 OpenMP threads each, a tiny
    # model's forward/backward ran 3-7x slower here, from threads waiting on each other.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    t_start = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_dir = warm_start(args, out)
    t_sft = time.monotonic() - t_start

    data_dir, client_dir = out / "data", out / "clients"
    for d in (data_dir, client_dir):
        shutil.rmtree(d, ignore_errors=True)
    client_dir.mkdir(parents=True)
    from swarmrl_server.net import free_port

    port = free_port()
    print(f"[demo] starting the server (train: GRPO + PPO-clip, async) on 127.0.0.1:{port}",
          flush=True)
    server = start_server(args, model_dir, data_dir, port, out / "server.log")
    clients: list[subprocess.Popen[bytes]] = []
    try:
        per_client = -(-args.rl_episodes // args.clients)
        print(f"[demo] {args.clients} clients play {per_client} fruit-quiz episodes each "
              f"(at most {args.rl_minutes:g} min; groups of {args.group_size}, "
              f"{args.batch_groups} groups per training step)", flush=True)
        t_rl = time.monotonic()
        for i in range(args.clients):
            clients.append(subprocess.Popen(
                [sys.executable, "-m", "examples.fruit_quiz.agent", "--target", f"127.0.0.1:{port}",
                 "--episodes", str(per_client), "--seconds", str(args.rl_minutes * 60),
                 "--group-size", str(args.group_size),
                 "--temperature", str(args.temperature), "--seed", str(args.seed * 100 + i),
                 "--out", str(client_dir / f"client-{i}.jsonl")],
                cwd=REPO, stdout=open(out / f"client-{i}.log", "wb"), stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            ))
        progress(clients, server, client_dir, data_dir, t_rl)
        for c in clients:
            c.wait()
        rl_s = time.monotonic() - t_rl
    finally:
        for c in clients:
            if c.poll() is None:
                c.kill()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
    return report(args, out, client_dir, data_dir, t_sft, rl_s, time.monotonic() - t_start)


def progress(clients: list[subprocess.Popen[bytes]], server: subprocess.Popen[bytes],
             client_dir: Path, data_dir: Path, t0: float) -> None:
    """Prints a line every 20 s: episodes played, recent reward, training steps."""
    last = 0.0
    while any(c.poll() is None for c in clients):
        if server.poll() is not None:
            raise SystemExit("the server exited during the run; see server.log")
        time.sleep(1.0)
        if time.monotonic() - last < 20:
            continue
        last = time.monotonic()
        eps = episodes_of(client_dir)
        recent = [e["reward"] for e in eps[-200:]]
        steps = read_jsonl(data_dir / "metrics.jsonl")
        mean = sum(recent) / len(recent) if recent else float("nan")
        version = int(steps[-1].get("actor/policy_version", 0)) if steps else 0
        dropped = int(steps[-1].get("drop/total_stale", 0)) if steps else 0
        print(f"[demo] {time.monotonic() - t0:5.0f}s  episodes {len(eps):5d}  "
              f"reward (last 200) {mean:.3f}  steps {len(steps):4d}  policy v{version}  "
              f"stale-dropped {dropped}", flush=True)


def report(args: argparse.Namespace, out: Path, client_dir: Path, data_dir: Path,
           sft_s: float, rl_s: float, total_s: float) -> int:
    eps = episodes_of(client_dir)
    steps = read_jsonl(data_dir / "metrics.jsonl")
    if len(eps) < 10:
        print("[demo] too few episodes to report; see the logs in", out)
        return 1
    rewards = [e["reward"] for e in eps]
    first, last = fifths(rewards)
    errors = sum(1 for p in client_dir.glob("*.jsonl") for r in read_jsonl(p) if "error" in r)
    title = (f"fruit quiz, tiny model, seed {args.seed}: first fifth {first:.2f} -> "
             f"last fifth {last:.2f} ({len(eps)} episodes, {len(steps)} steps)")
    png = out / "reward.png"
    plot(eps, steps, png, title)
    summary = {
        "seed": args.seed, "engine": args.engine, "episodes": len(eps), "failed_episodes": errors,
        "train_steps": len(steps),
        "policy_version": int(steps[-1].get("actor/policy_version", 0)) if steps else 0,
        "first_fifth_mean": round(first, 4), "last_fifth_mean": round(last, 4),
        "improvement": round(last - first, 4),
        "stale_dropped": int(steps[-1].get("drop/total_stale", 0)) if steps else 0,
        "warm_start_s": round(sft_s, 1), "rl_s": round(rl_s, 1), "total_s": round(total_s, 1),
        "png": str(png), "tensorboard": str(data_dir / "tb"),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"[demo] {len(eps)} episodes, {len(steps)} training steps, policy version "
          f"{summary['policy_version']}, {errors} failed episodes", flush=True)
    print(f"[demo] mean reward: first fifth {first:.3f}, last fifth {last:.3f} "
          f"(+{last - first:.3f}; chance is 0.25)", flush=True)
    print(f"[demo] time: warm start {sft_s:.0f}s, RL {rl_s:.0f}s, total {total_s:.0f}s", flush=True)
    print(f"[demo] reward curve: {png}   TensorBoard: tensorboard --logdir {data_dir / 'tb'}",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
