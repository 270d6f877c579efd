"""What the real-environment examples share: a training server, held-out evaluation, a run.

`examples/reasoning_gym/` and `examples/textworld/` each bring an `Environment` (how to
play one training group and one held-out item); `run` does the rest:

1. starts ``swarmrl serve --train`` on the model with the example's train options
   (`Server`), its data dir under the run's folder;
2. **eval before**: plays every held-out item once, greedily, and *aborts* each
   episode, so no evaluation episode is ever trained on (the store keeps their calls
   for inspection, the trainer never sees them);
3. **training** for ``--train-minutes``: groups of episodes on training items only
   (items come from disjoint seeds, so no held-out item is ever played here);
4. **eval after**, the same items and settings as before;
5. writes ``summary.json`` (success before/after with a Wilson interval, steps, wall
   time, merge statistics of the run's episodes) and the ``swarmrl plot`` PNGs.

``--train-minutes 0`` stops after step 2: the base model's held-out success, the
measurement used to pick a difficulty.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from examples.demo import read_jsonl

REPO = Path(__file__).resolve().parent.parent
_TARGET = re.compile(r"serving gRPC on (\S+)")
_HTTP = re.compile(r"serving OpenAI-compatible HTTP on (\S+)")


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion (95% by default).

    Unlike the normal approximation it stays inside [0, 1] and is usable at 0 or n
    successes, which small held-out sets hit.
    """
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Score:
    """Held-out success: how many items of the set were solved."""

    solved: int
    n: int

    @property
    def rate(self) -> float:
        return self.solved / self.n if self.n else 0.0

    def as_dict(self) -> dict[str, Any]:
        low, high = wilson(self.solved, self.n)
        return {"solved": self.solved, "n": self.n, "rate": round(self.rate, 4),
                "wilson95": [round(low, 4), round(high, 4)]}

    def __str__(self) -> str:
        low, high = wilson(self.solved, self.n)
        return f"{self.rate:.3f} ({self.solved}/{self.n}, 95% CI {low:.3f}-{high:.3f})"


class Environment(Protocol):
    """One example's side of a run."""

    name: str

    async def evaluate(self, server: Server) -> list[dict[str, Any]]:
        """Plays every held-out item once (greedy, aborted); one record per item with a
        bool ``success`` (and whatever else the example logs)."""
        ...

    async def train_round(self, server: Server, round_index: int) -> list[dict[str, Any]]:
        """Plays training groups (ended with their rewards); one record per episode with
        a float ``reward``."""
        ...


@dataclass
class Server:
    """A ``swarmrl serve`` subprocess and the addresses it serves."""

    proc: subprocess.Popen[bytes] | None
    """None for a server this run did not start (`attach`): it is neither watched nor stopped."""
    target: str
    http_url: str
    data_dir: Path

    @classmethod
    def attach(cls, target: str, data_dir: Path) -> Server:
        """A server someone else runs (``--target``: a study's, or one started by hand);
        `data_dir` is its ``--data-dir``, read for the trainer's metrics."""
        return cls(None, target, "", data_dir)

    def alive(self) -> bool:
        """False once a server this run started has exited (an attached one may be down
        for a restart: its clients reconnect, so it counts as alive)."""
        return self.proc is None or self.proc.poll() is None

    @classmethod
    def start(cls, model: str, train_options: Mapping[str, str], data_dir: Path,
              log_path: Path, extra_args: Sequence[str] = ()) -> Server:
        cmd = [sys.executable, "-m", "swarmrl_server.cli", "--model", model, "--port", "0",
               "--http-port", "0", "--data-dir", str(data_dir), *extra_args]
        if train_options:
            cmd.append("--train")
            for key, value in train_options.items():
                cmd += ["--train-option", f"{key}={value}"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        deadline = time.monotonic() + 600  # SmolLM2's first load converts the GGUF (~1 min)
        while True:
            text = log_path.read_text(errors="replace")
            target, http = _TARGET.search(text), _HTTP.search(text)
            if target and http:
                return cls(proc, target.group(1), http.group(1), data_dir)
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"the server did not start; see {log_path}:\n{text[-3000:]}")
            time.sleep(0.2)

    def steps(self) -> list[dict[str, Any]]:
        """The trainer's metrics.jsonl rows so far."""
        return read_jsonl(self.data_dir / "metrics.jsonl")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def merge_report(data_dir: Path) -> dict[str, dict[str, float]]:
    """Calls -> timelines and the tokens merging saves, from the run's store (read after
    the server stopped): for the ended episodes (what was trained) and the aborted ones
    (the evals), each episode's calls merged by the trainer's own `merge_calls`.

    ``tokens_as_calls`` counts every call as its own row (prompt + completion);
    ``tokens_as_timelines`` counts the merged timelines; their ratio is what a trainer
    forward saves by merging.
    """
    from swarmrl_server.store.records import EpisodeState
    from swarmrl_server.store.sqlite import SqliteStore
    from swarmrl_server.timelines.merge import MergeStats, merge_calls

    async def collect() -> dict[str, dict[str, float]]:
        store = SqliteStore(data_dir / "swarm.sqlite3")
        await store.open()
        try:
            out = {}
            for label, state in (("trained", EpisodeState.ENDED), ("eval", EpisodeState.ABORTED)):
                total, episodes = MergeStats(), await store.list_episodes(state, with_calls=True)
                for episode in episodes:
                    total.add(merge_calls(episode.calls)[1])
                out[label] = {
                    "episodes": len(episodes), "calls": total.calls,
                    "timelines": total.timelines, "forks": total.forks,
                    "tokens_as_calls": total.tokens_per_call,
                    "tokens_as_timelines": total.tokens_merged,
                    "token_ratio": round(total.tokens_per_call / max(total.tokens_merged, 1), 3)}
            return out
        finally:
            await store.close()

    return asyncio.run(collect())


def by_task(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Held-out success per task, for records that name one."""
    tasks = sorted({str(r["task"]) for r in records if "task" in r})
    return {t: Score(sum(bool(r["success"]) for r in records if r.get("task") == t),
                     sum(1 for r in records if r.get("task") == t)).as_dict() for t in tasks}


async def _eval(env: Environment, server: Server, out: Path,
                label: str) -> tuple[Score, list[dict[str, Any]]]:
    t0 = time.monotonic()
    records = await env.evaluate(server)
    (out / f"eval-{label}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    score = Score(sum(bool(r["success"]) for r in records), len(records))
    print(f"[{env.name}] eval {label}: held-out success {score}  "
          f"({time.monotonic() - t0:.0f} s)", flush=True)
    for task, row in by_task(records).items():
        print(f"[{env.name}]   {task}: {row['rate']:.3f} ({row['solved']}/{row['n']})", flush=True)
    return score, records


async def _train(env: Environment, server: Server, out: Path, deadline: float,
                 rounds: int) -> int:
    """Plays training rounds until `deadline` (wall clock; or `rounds` rounds, if > 0);
    returns the episodes played."""
    t0, played, last = time.monotonic(), 0, 0.0
    log_path = out / "train-episodes.jsonl"
    with open(log_path, "a") as log:
        i = 0
        while time.time() < deadline and not (rounds and i >= rounds):
            if not server.alive():
                raise SystemExit("the server exited during training; see server.log")
            records = await env.train_round(server, i)
            i += 1
            now = time.time()
            for r in records:
                log.write(json.dumps({"time": now, **r}) + "\n")
            log.flush()
            played += len(records)
            if time.monotonic() - last > 30:
                last = time.monotonic()
                recent = [r["reward"] for r in read_jsonl(log_path)[-200:] if "reward" in r]
                steps = server.steps()
                mean = sum(recent) / len(recent) if recent else float("nan")
                print(f"[{env.name}] {time.monotonic() - t0:5.0f}s  episodes {played:5d}  "
                      f"reward (last 200) {mean:.3f}  steps {len(steps)}", flush=True)
    return played


def run(env: Environment, *, out: Path, model: str, train_options: Mapping[str, str],
        train_minutes: float, train_rounds: int = 0, server_args: Sequence[str] = (),
        describe: Mapping[str, Any] | None = None, reuse_before: Path | None = None,
        attach: Server | None = None) -> dict[str, Any]:
    """Eval before, training, eval after (see the module docstring); returns the summary.

    `reuse_before`: the folder of an eval-only run (``--train-minutes 0``) of the same
    model and settings, whose eval stands in for this run's eval before (it is the
    same greedy pass over the same held-out set); its settings must match `describe`.

    `attach`: play against this server instead of starting one (its trainer options
    are its own; `train_options` and `server_args` are ignored). Such a run is a
    client another process supervises (a study's), so it resumes: started again on the
    same `out`, it keeps its eval before, trains until its first start's deadline, and
    a finished run returns its summary without playing again.
    """
    out.mkdir(parents=True, exist_ok=True)
    data_dir = out / "data"
    if attach is not None:
        data_dir = attach.data_dir
        if (out / "summary.json").is_file():
            done = json.loads((out / "summary.json").read_text())
            if "after" in done or train_minutes <= 0:
                print(f"[{env.name}] {out} already finished", flush=True)
                return dict(done)
    elif data_dir.exists() and any(data_dir.iterdir()):
        raise SystemExit(f"{data_dir} is not empty: pick a new --out")
    t_start = time.monotonic()
    # SIGTERM (a stopped run) unwinds like Ctrl-C, so the server below is stopped too.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    server = attach or Server.start(model, train_options if train_minutes > 0 else {}, data_dir,
                                    out / "server.log", server_args)
    print(f"[{env.name}] server on {server.target}"
          + ("" if attach else f" (HTTP {server.http_url}); logs in {out / 'server.log'}"),
          flush=True)
    summary: dict[str, Any] = {"environment": env.name, "model": model, **(describe or {})}
    try:
        if reuse_before is not None:
            before, records = _reused(reuse_before, model, describe or {}, out)
            summary["before_from"] = str(reuse_before)
        elif attach is not None and (out / "eval-before.jsonl").is_file():
            before, records = _kept_eval(out, "this run's, before a restart")
        else:
            before, records = asyncio.run(_eval(env, server, out, "before"))
        summary["before"] = {**before.as_dict(), "by_task": by_task(records)}
        if train_minutes > 0:
            if attach is None:
                summary["train_options"] = dict(train_options)
            t_train = time.monotonic()
            deadline = _train_deadline(out, train_minutes)
            summary["train_episodes"] = asyncio.run(
                _train(env, server, out, deadline, train_rounds))
            summary["train_s"] = round(time.monotonic() - t_train, 1)
            steps = server.steps()
            summary["train_steps"] = len(steps)
            after, records = asyncio.run(_eval(env, server, out, "after"))
            summary["after"] = {**after.as_dict(), "by_task": by_task(records),
                                "policy_versions": sorted({r["policy_version"] for r in records
                                                           if "policy_version" in r})}
            summary["gain"] = round(after.rate - before.rate, 4)
            print(f"[{env.name}] held-out success {before.rate:.3f} -> {after.rate:.3f} "
                  f"({summary['gain']:+.3f}) after {len(steps)} steps, "
                  f"{summary['train_episodes']} episodes", flush=True)
    finally:
        server.stop()
    summary["total_s"] = round(time.monotonic() - t_start, 1)
    summary["merge"] = merge_report(data_dir)
    if train_minutes > 0 and (data_dir / "metrics.jsonl").is_file():
        from swarmrl._cli import main as swarmrl_cli

        swarmrl_cli(["plot", str(data_dir), "--out", str(out / "plots")])
        plot_episode_rewards({out.name: out}, out / "plots" / "episode-reward.png")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _train_deadline(out: Path, minutes: float) -> float:
    """When training ends, as a wall-clock time kept in ``out/train-started``: a run
    started again (a restarted client) ends when its first start would have."""
    marker = out / "train-started"
    if not marker.is_file():
        marker.write_text(f"{time.time()}\n")
    return float(marker.read_text()) + minutes * 60


def _reused(folder: Path, model: str, describe: Mapping[str, Any],
            out: Path) -> tuple[Score, list[dict[str, Any]]]:
    """An earlier eval-only run's eval, after checking it evaluated the same thing."""
    earlier = json.loads((folder / "summary.json").read_text())
    for key, value in {"model": model, **describe}.items():
        if json.loads(json.dumps(value)) != earlier.get(key):
            raise SystemExit(f"--reuse-before {folder}: its {key} is {earlier.get(key)!r}, "
                             f"this run's is {value!r}")
    records = read_jsonl(folder / "eval-before.jsonl")
    (out / "eval-before.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return _kept_eval(out, f"from {folder}")


def _kept_eval(out: Path, source: str) -> tuple[Score, list[dict[str, Any]]]:
    """The eval before already in `out` (`source` says where it came from)."""
    records = read_jsonl(out / "eval-before.jsonl")
    score = Score(sum(bool(r["success"]) for r in records), len(records))
    print(f"eval before ({source}): held-out success {score}", flush=True)
    return score, records


def add_common_args(p: argparse.ArgumentParser) -> None:
    """The options both examples share; each sets its own defaults (`set_defaults`)."""
    p.add_argument("--model", default="smollm2", help="the server's --model (tiny: a smoke run)")
    p.add_argument("--out", help="run folder (its data/ must be new)")
    p.add_argument("--train-minutes", type=float, default=30.0,
                   help="training time between the two evals (0: eval the base model only)")
    p.add_argument("--train-rounds", type=int, default=0,
                   help="stop training after this many rounds (0: only --train-minutes)")
    p.add_argument("--group-size", type=int, default=8, help="episodes per item (a GRPO group)")
    p.add_argument("--parallel-groups", type=int, help="groups played at once in a round")
    p.add_argument("--batch-groups", type=int, help="varied groups per training step")
    p.add_argument("--lr", type=float, default=1e-5, help="AdamW learning rate")
    p.add_argument("--temperature", type=float, default=1.0, help="training sampling temperature")
    p.add_argument("--max-tokens", type=int, help="tokens per reply")
    p.add_argument("--concurrency", type=int, help="eval episodes at once")
    p.add_argument("--seed", type=int, default=0, help="trainer seed and training item order")
    p.add_argument("--train-option", action="append", default=[], metavar="KEY=VALUE",
                   help="override one of the example's trainer settings (repeatable)")
    p.add_argument("--reuse-before", type=Path, metavar="RUN_DIR",
                   help="take the eval before from this eval-only run of the same settings")
    p.add_argument("--target", metavar="HOST:PORT",
                   help="play against this running server (a study's) instead of starting one; "
                        "the run then resumes when started again on the same --out")
    p.add_argument("--data-dir", type=Path,
                   help="with --target: the server's --data-dir (its metrics and store)")
    p.add_argument("--server-arg", action="append", default=[],
                   help="extra `swarmrl serve` argument (repeatable), e.g. --server-arg=--engine=vllm")


def train_options(args: argparse.Namespace, **extra: str) -> dict[str, str]:
    """The examples' trainer settings: batches of --batch-groups groups whose rewards vary
    (uniform groups teach nothing under GRPO and are dropped, counted), then `extra`,
    then the --train-option overrides."""
    options = {
        "batch_rule": "varied_groups", "group_size": str(args.group_size),
        "batch_size": str(args.batch_groups), "lr": str(args.lr), "seed": str(args.seed),
        "max_staleness": "4", "checkpoint_every": "0", "checkpoint_on_stop": "false",
        "progress": "false", **extra,
    }
    return with_overrides(options, args.train_option)


def run_from_args(env: Environment, args: argparse.Namespace, options: Mapping[str, str],
                  describe: Mapping[str, Any]) -> dict[str, Any]:
    """`run` with the common options; returns the summary it wrote."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    attach = None
    if args.target:
        if args.data_dir is None:
            raise SystemExit("--target needs --data-dir (the server's, for its metrics)")
        attach = Server.attach(args.target, args.data_dir)
    return run(env, out=Path(args.out), model=args.model, train_options=options,
               train_minutes=args.train_minutes, train_rounds=args.train_rounds,
               server_args=args.server_arg, reuse_before=args.reuse_before, describe=describe,
               attach=attach)


def with_overrides(options: Mapping[str, str], overrides: Sequence[str]) -> dict[str, str]:
    """The example's trainer settings with ``KEY=VALUE`` overrides applied."""
    out = dict(options)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--train-option {item!r}: expected KEY=VALUE")
        out[key] = value
    return out


def plot_episode_rewards(runs: Mapping[str, Path], out: Path, window: int = 96) -> Path:
    """Every training episode's reward (``train-episodes.jsonl``), as a moving mean over
    `window` episodes, one line per run: what the policy earns as it samples, unlike the
    trainer's ``reward/mean``, which averages only the groups a step trained on."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for label, folder in runs.items():
        rewards = [float(r["reward"]) for r in read_jsonl(folder / "train-episodes.jsonl")
                   if "reward" in r]
        means = [sum(rewards[i - window:i]) / window for i in range(window, len(rewards) + 1)]
        ax.plot(range(window, len(rewards) + 1), means, label=label)
    ax.set(xlabel="training episode", ylabel=f"reward (mean of last {window})",
           title="reward of every training episode")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m examples.env_runs RUN_DIR``: print a run's merge statistics;
    ``--episodes-plot OUT.png LABEL=RUN_DIR ...``: plot runs' training-episode rewards."""
    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("run_dirs", nargs="+", metavar="[LABEL=]RUN_DIR")
    p.add_argument("--episodes-plot", type=Path, metavar="OUT.png",
                   help="plot the runs' training-episode rewards instead")
    args = p.parse_args(argv)
    runs = {label or folder: Path(folder) for label, _, folder in
            (item.rpartition("=") for item in args.run_dirs)}
    if args.episodes_plot:
        print(plot_episode_rewards(runs, args.episodes_plot))
        return
    for folder in runs.values():
        print(json.dumps(merge_report(folder / "data"), indent=1))


async def gather_limited(limit: int, jobs: Sequence[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Runs the jobs with at most `limit` at once, results in order (exceptions returned)."""
    sem = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[Any]]) -> Any:
        async with sem:
            return await job()

    return await asyncio.gather(*(one(j) for j in jobs), return_exceptions=True)


if __name__ == "__main__":
    main()
