"""Two trainable models learn from the same episodes, fed by two client processes, and
one client is replaced by an edited version mid-run (CPU, a few minutes).

    python -m examples.two_models                  # writes runs/two-models/reward.png
    python -m examples.two_models --episodes 400   # a shorter smoke run
    python -m examples.two_models --lora-rank 8 --lr 2e-3   # two LoRA adapters, one base

What it does (the game: examples/proposer_solver/game.py):

1. Warm-starts two tiny models (``tiny:SEED`` and ``tiny:SEED+1``) with a few
   supervised steps on the answer *format* only (random answers): the proposer
   ("Which color is apple?" → a color), the solver ("Which fruit is red?" → a fruit).
2. Starts one ``swarmrl serve --train`` hosting both, each with its own trainer.
3. Starts the solver client (examples/proposer_solver/solver.py): a plain OpenAI
   client in its own process that imports no swarmrl, and the proposer client v1
   (the SDK), which runs the episodes and ends each with a reward per model.
4. Halfway, the proposer client stops and an *edited copy* of its source (a new
   ``AGENT_VERSION``) takes over, while the server keeps training; ``ListClients``
   is printed before and after.
5. Writes ``<out>/reward.png`` (both models' rewards over time, the swap marked),
   ``<out>/summary.json`` and prints each reward's first fifth → last fifth.
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

from examples.demo import fifths, read_jsonl

REPO = Path(__file__).resolve().parent.parent
PROPOSER = REPO / "examples" / "proposer_solver" / "proposer.py"

TRAIN_OPTIONS = {
    "adv_estimator": "grpo", "policy_loss": "vanilla", "batch_rule": "groups",
    "batch_size": "4", "group_size": "4", "mode": "async", "max_staleness": "4",
    "checkpoint_every": "0", "checkpoint_on_stop": "false", "progress": "false",
    "max_pending": "48",
    # A small entropy bonus: a proposer that always writes the same clue stops exploring.
    "entropy_coeff": "0.01",
}


def warm_start(name: str, seed: int, steps: int, out: Path) -> Path:
    """A tiny model after `steps` supervised format-only steps (cached per name and seed)."""
    import torch

    from examples.proposer_solver import game
    from swarmrl_server.models import resolve_model
    from swarmrl_server.trainer.sft import SFTConfig, train_sft

    torch.set_num_threads(1)
    target = out / f"sft-{name}-tiny{seed}-{steps}"
    if (target / "model.safetensors").is_file():
        return target
    conversation = {"proposer": game.proposer_warm_start, "solver": game.solver_warm_start,
                    # One base for both adapters (--lora-rank): both formats, half each.
                    "both": lambda rng: (game.proposer_warm_start if rng.random() < 0.5
                                         else game.solver_warm_start)(rng)}[name]
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    train_sft(resolve_model(f"tiny:{seed}", None), tmp, conversation,
              SFTConfig(steps=steps, batch_size=16, lr=1e-3, seed=seed),
              log=lambda line: print(f"[two-models] {name}: {line}", flush=True))
    tmp.rename(target)
    return target


def wait_for(path: Path, marker: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 300
    while marker not in (path.read_text(errors="replace") if path.exists() else ""):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start; see {path}")
        time.sleep(0.2)


def list_clients(target: str) -> str:
    """`swarmrl status` (server, models, live clients, agent versions)."""
    done = subprocess.run([sys.executable, "-m", "swarmrl._cli", "status", "--target", target],
                          capture_output=True, text=True, cwd=REPO, check=False)
    return done.stdout.split("\n\n", 2)[-1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/two-models")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--episodes", type=int, default=2400, help="episodes in all (whole groups)")
    p.add_argument("--minutes", type=float, default=8.0, help="time limit of the RL phase")
    p.add_argument("--sft-steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--lora-rank", type=int, default=0,
                   help="train both models as LoRA adapters of this rank on ONE shared base "
                        "(warm-started on both formats): one copy of it in the server")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.lora_rank:
        base = warm_start("both", args.seed, args.sft_steps, out)
        models = {"proposer": base, "solver": base}
    else:
        models = {name: warm_start(name, args.seed + i, args.sft_steps, out)
                  for i, name in enumerate(("proposer", "solver"))}
    sft_s = time.monotonic() - t0
    data_dir, spool, logs = out / "data", out / "spool", out / "episodes"
    for d in (data_dir, spool, logs):
        shutil.rmtree(d, ignore_errors=True)
    logs.mkdir(parents=True)
    from swarmrl_server.net import free_port

    port, http_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "swarmrl_server.cli", "--port", str(port),
           "--http-port", str(http_port), "--data-dir", str(data_dir), "--train",
           "--max-batch-size", "64", "--log-level", "warning"]
    for name, path in models.items():
        cmd += ["--model", f"{name}={path}"]
    lora = {"lora_rank": str(args.lora_rank)} if args.lora_rank else {}
    for key, value in {**TRAIN_OPTIONS, **lora, "lr": str(args.lr),
                       "seed": str(args.seed)}.items():
        cmd += ["--train-option", f"{key}={value}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    server_log = out / "server.log"
    server = subprocess.Popen(cmd, stdout=open(server_log, "wb"), stderr=subprocess.STDOUT,
                              cwd=REPO, env=env)
    procs: list[subprocess.Popen[bytes]] = []
    target = f"127.0.0.1:{port}"
    try:
        wait_for(server_log, f"serving gRPC on {target}", server, "the server")
        stop_file = spool / "stop"
        solver = subprocess.Popen(
            [sys.executable, str(REPO / "examples" / "proposer_solver" / "solver.py"),
             "--spool", str(spool), "--stop-file", str(stop_file)],
            cwd=REPO, env=env, stdout=open(out / "solver.log", "wb"), stderr=subprocess.STDOUT)
        procs.append(solver)
        t_rl = time.monotonic()
        half = args.episodes // 2
        print(f"[two-models] proposer v1 plays {half} episodes; the solver answers; the "
              "server trains both models", flush=True)
        swap_time = 0.0
        for version, source in ((1, PROPOSER), (2, edited_copy(out))):
            remaining = args.minutes * 60 - (time.monotonic() - t_rl)
            proc = subprocess.Popen(
                [sys.executable, str(source), "--target", target, "--spool", str(spool),
                 "--episodes", str(half), "--seconds", str(max(remaining, 1) / (3 - version)),
                 "--seed", str(args.seed * 10 + version), "--out", str(logs / f"v{version}.jsonl")],
                cwd=REPO, env=env, stdout=open(out / f"proposer-v{version}.log", "wb"),
                stderr=subprocess.STDOUT)
            procs.append(proc)
            time.sleep(2)
            print(f"[two-models] live clients while proposer v{version} runs:\n"
                  f"{list_clients(target)}", flush=True)
            watch(proc, server, logs, data_dir, t_rl)
            if version == 1:
                swap_time = time.time()
                print("[two-models] proposer v1 exited; starting its edited copy "
                      "(AGENT_VERSION proposer/2) without stopping the server", flush=True)
        stop_file.touch()
        solver.wait(timeout=60)
        rl_s = time.monotonic() - t_rl
        print(f"[two-models] after the run:\n{list_clients(target)}", flush=True)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
    return report(args, out, logs, data_dir, swap_time, sft_s, rl_s)


def edited_copy(out: Path) -> Path:
    """The proposer's source with a new agent version: the "edited client"."""
    source = PROPOSER.read_text()
    assert 'AGENT_VERSION = "proposer/1"' in source
    path = out / "proposer_v2.py"
    path.write_text(source.replace('AGENT_VERSION = "proposer/1"', 'AGENT_VERSION = "proposer/2"'))
    return path


def episodes(logs: Path) -> list[dict[str, Any]]:
    rows = [r for p in sorted(logs.glob("*.jsonl")) for r in read_jsonl(p)]
    return sorted((r for r in rows if "error" not in r), key=lambda r: r["time"])


def watch(proc: subprocess.Popen[bytes], server: subprocess.Popen[bytes], logs: Path,
          data_dir: Path, t0: float) -> None:
    last = time.monotonic()
    while proc.poll() is None:
        if server.poll() is not None:
            raise SystemExit("the server exited during the run; see server.log")
        time.sleep(1.0)
        if time.monotonic() - last < 20:
            continue
        last = time.monotonic()
        eps = episodes(logs)[-160:]
        steps = read_jsonl(data_dir / "metrics.jsonl")
        if eps:
            p = sum(e["proposer_reward"] for e in eps) / len(eps)
            s = sum(e["solver_reward"] for e in eps) / len(eps)
            print(f"[two-models] {time.monotonic() - t0:5.0f}s  episodes {len(episodes(logs)):5d}"
                  f"  reward (last 160) proposer {p:.3f} solver {s:.3f}  steps "
                  f"{sum(r['model'] == 'proposer' for r in steps)}/"
                  f"{sum(r['model'] == 'solver' for r in steps)}", flush=True)


def report(args: argparse.Namespace, out: Path, logs: Path, data_dir: Path, swap_time: float,
           sft_s: float, rl_s: float) -> int:
    eps = episodes(logs)
    if len(eps) < 10:
        print("[two-models] too few episodes to report; see the logs in", out)
        return 1
    failed = sum(1 for p in logs.glob("*.jsonl") for r in read_jsonl(p) if "error" in r)
    steps = read_jsonl(data_dir / "metrics.jsonl")
    summary: dict[str, Any] = {"seed": args.seed, "episodes": len(eps), "failed_episodes": failed,
                               "warm_start_s": round(sft_s, 1), "rl_s": round(rl_s, 1)}
    for model in ("proposer", "solver"):
        first, last = fifths([e[f"{model}_reward"] for e in eps])
        summary[model] = {"first_fifth": round(first, 3), "last_fifth": round(last, 3),
                          "train_steps": sum(r["model"] == model for r in steps)}
    summary["episodes_by_agent_version"] = {
        v: sum(e["agent_version"] == v for e in eps) for v in ("proposer/1", "proposer/2")}
    plot(eps, swap_time, out / "reward.png", summary)
    summary["png"] = str(out / "reward.png")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    for model in ("proposer", "solver"):
        m = summary[model]
        print(f"[two-models] {model}: first fifth {m['first_fifth']:.3f} -> last fifth "
              f"{m['last_fifth']:.3f} ({m['train_steps']} training steps)", flush=True)
    print(f"[two-models] {len(eps)} episodes ({summary['episodes_by_agent_version']}), "
          f"{failed} failed; warm start {sft_s:.0f}s, RL {rl_s:.0f}s; {out / 'reward.png'}",
          flush=True)
    return 0


def plot(eps: list[dict[str, Any]], swap_time: float, path: Path, summary: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = eps[0]["time"]
    minutes = [(e["time"] - t0) / 60 for e in eps]
    window = max(len(eps) // 20, 16)
    fig, ax = plt.subplots(figsize=(9, 5))
    for model, color in (("proposer", "tab:purple"), ("solver", "tab:green")):
        rewards = [e[f"{model}_reward"] for e in eps]
        rolling = [sum(rewards[max(0, i - window + 1): i + 1]) / (i + 1 - max(0, i - window + 1))
                   for i in range(len(rewards))]
        m = summary[model]
        ax.plot(minutes, rolling, color=color, lw=2,
                label=f"{model} (first fifth {m['first_fifth']:.2f} -> last {m['last_fifth']:.2f})")
    if swap_time:
        ax.axvline((swap_time - t0) / 60, color="gray", ls="--", lw=1,
                   label="proposer client replaced (v1 -> v2)")
    ax.axhline(0.25, color="gray", ls=":", lw=1, label="chance")
    ax.set_xlabel("minutes")
    ax.set_ylabel(f"reward (rolling mean of {window} episodes)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"two models trained by the same episodes ({len(eps)} episodes)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
