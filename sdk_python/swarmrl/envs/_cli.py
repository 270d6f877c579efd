"""``swarmrl train ENV`` and ``swarmrl eval ENV``: an environment against a swarm server.

Both either start a server (``--model``, ``--engine``, ``--train-option``, ``--server-arg``;
stopped at the end) or attach to a running one (``--target``). Everything a run writes
goes to ``--out``: ``rollouts.jsonl`` (one record per rollout, train and eval),
``eval-*.json`` (each evaluation's figures) and ``summary.json``.

An attached ``swarmrl train`` (``--target``, e.g. a study's client) started again on the
same ``--out`` resumes: it keeps its eval before, its first start's deadline and the
groups it trained, and once finished plays nothing more.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from swarmrl._client import AsyncSwarmClient
from swarmrl._sampling import SamplingParams
from swarmrl.envs._api import Environment, Split
from swarmrl.envs._load import load_environment, parse_env_args
from swarmrl.envs._report import EvalReport
from swarmrl.envs._runner import RolloutRecord, Runner, RunnerConfig
from swarmrl.envs._server import ServerProcess

__all__ = ["eval_main", "train_main"]

_ENV_HELP = """\
ENV names the environment:
  package.module:attr     a swarmrl.envs.Environment, or a class or function making one
                          (called with the --env-arg values as keyword arguments)
  path/to/file.py:attr    the same, from a file
  verifiers:ID            a verifiers environment (swarmrl.envs.verifiers)
  openenv:SPEC            an OpenEnv environment (swarmrl.envs.openenv)
"""


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("env", metavar="ENV", help="the environment (see below)")
    p.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="an argument of the environment (repeatable; JSON values parsed)")
    server = p.add_argument_group("server (start one, or --target a running one)")
    server.add_argument("--target", metavar="HOST:PORT",
                        help="attach to this running server instead of starting one")
    server.add_argument("--api-key", default=os.environ.get("SWARMRL_API_KEY"),
                        help="API key for --target (default: $SWARMRL_API_KEY)")
    server.add_argument("--model", default="tiny",
                        help="the started server's --model (default: %(default)s)")
    server.add_argument("--engine", help="the started server's --engine (hf, vllm, echo)")
    server.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                        help="another `swarmrl serve` argument (repeatable), "
                             "e.g. --server-arg=--cache-dir=/tmp/models")
    play = p.add_argument_group("rollouts")
    play.add_argument("--policy-model", default="",
                      help="the model rollouts call (default: the server's first)")
    play.add_argument("--concurrency", type=int, default=16, help="rollouts at once")
    play.add_argument("--rollout-timeout", type=float, default=600.0, metavar="SECONDS",
                      help="a longer rollout fails (aborted, retried as a fresh episode)")
    play.add_argument("--retries", type=int, default=1,
                      help="fresh attempts after a failed rollout (default: %(default)s)")
    play.add_argument("--max-tokens", type=int, help="tokens per model call")
    play.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                      help="show a progress bar")
    p.add_argument("--out", type=Path,
                   help="run folder (default: runs/<env>-<time>); its data/ holds a started "
                        "server's data dir")


def _parser(command: str) -> argparse.ArgumentParser:
    if command == "train":
        p = argparse.ArgumentParser(
            prog="swarmrl train", formatter_class=argparse.RawDescriptionHelpFormatter,
            description="Train a model on an environment: evaluate val, play GRPO groups "
                        "for --minutes or --groups, evaluate val again.",
            epilog=_ENV_HELP + "\nexample:\n  swarmrl train examples.reasoning_gym.env:"
                   "ReasoningGym --model smollm2 --minutes 30 --train-option lr=1e-5\n")
    else:
        p = argparse.ArgumentParser(
            prog="swarmrl eval", formatter_class=argparse.RawDescriptionHelpFormatter,
            description="Evaluate a model on a split of an environment (every episode "
                        "aborted: never trained).",
            epilog=_ENV_HELP + "\nexample:\n  swarmrl eval examples.textworld.env:TextWorld "
                   "--model smollm2 --split val\n")
    _common(p)
    if command == "train":
        p.add_argument("--train-option", action="append", default=[], metavar="KEY=VALUE",
                       help="a trainer option of the started server (repeatable; "
                            "`swarmrl serve --train-option help` lists them)")
        budget = p.add_mutually_exclusive_group(required=True)
        budget.add_argument("--minutes", type=float, help="train this long (wall clock)")
        budget.add_argument("--groups", type=int, help="train on this many groups")
        p.add_argument("--group-size", type=int, default=8,
                       help="rollouts per item, a GRPO group (also the started server's "
                            "group_size; default: %(default)s)")
        p.add_argument("--temperature", type=float, default=1.0,
                       help="training sampling temperature (evaluation is greedy)")
        p.add_argument("--top-p", type=float, help="training nucleus sampling mass")
        p.add_argument("--seed", type=int, default=0, help="order of a finite train split")
        p.add_argument("--eval-split", choices=("val", "none"), default="val",
                       help="evaluate this split before and after training (default: val)")
        p.add_argument("--eval-limit", type=int, help="evaluate only the first N items")
    else:
        p.add_argument("--split", choices=("val", "test"), default="val",
                       help="the split to evaluate (default: val)")
        p.add_argument("--k", type=int, default=1,
                       help="rollouts per item (k > 1 samples at --temperature; pass@k)")
        p.add_argument("--temperature", type=float, default=1.0,
                       help="sampling temperature when --k > 1 (k = 1 is greedy)")
        p.add_argument("--limit", type=int, help="evaluate only the first N items")
    return p


class _Records:
    """``rollouts.jsonl``, appended as rollouts finish (a crash keeps what was played)."""

    def __init__(self, path: Path) -> None:
        self._file: IO[str] = open(path, "a")  # noqa: SIM115 - closed by close()

    def __call__(self, record: RolloutRecord) -> None:
        self._file.write(json.dumps({"time": time.time(), **record.as_dict()}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _out_dir(args: argparse.Namespace, env: Environment) -> Path:
    out: Path = args.out or Path("runs") / f"{env.label}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    return out


def _server(args: argparse.Namespace, out: Path, train_options: dict[str, str] | None
            ) -> ServerProcess:
    if args.target:
        return ServerProcess(args.target)
    data_dir = out / "data"
    if data_dir.exists() and any(data_dir.iterdir()):
        raise SystemExit(f"{data_dir} is not empty: pick a new --out")
    server = ServerProcess.start(model=args.model, engine=args.engine,
                                 train_options=train_options, data_dir=data_dir,
                                 log_path=out / "server.log", extra_args=args.server_arg)
    print(f"server on {server.target}; its log: {server.log_path}", file=sys.stderr)
    return server


def _train_options(args: argparse.Namespace) -> dict[str, str]:
    options = {"group_size": str(args.group_size)}
    for pair in args.train_option:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--train-option {pair!r}: expected KEY=VALUE")
        options[key] = value
    if options["group_size"] != str(args.group_size):
        raise SystemExit(f"--train-option group_size={options['group_size']} differs from "
                         f"--group-size {args.group_size}: groups would never fill")
    return options


def _runner_config(args: argparse.Namespace, *, training: bool) -> RunnerConfig:
    sampling = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens,
                              top_p=getattr(args, "top_p", None))
    return RunnerConfig(
        group_size=getattr(args, "group_size", 1), concurrency=args.concurrency,
        rollout_timeout_s=args.rollout_timeout, retries=args.retries, sampling=sampling,
        eval_sampling=SamplingParams(temperature=0.0, max_tokens=args.max_tokens),
        model=args.policy_model, seed=getattr(args, "seed", 0), progress=args.progress,
        agent_version="swarmrl-train" if training else "swarmrl-eval")


def _write_eval(out: Path, name: str, report: EvalReport) -> dict[str, Any]:
    figures = report.as_dict()
    (out / f"eval-{name}.json").write_text(json.dumps(figures, indent=1) + "\n")
    print(str(report), file=sys.stderr)
    return figures


def _resumed(out: Path, args: argparse.Namespace) -> tuple[dict[str, Any] | None, float | None,
                                                          int | None]:
    """What an attached run started again on the same --out keeps (a study restarts its
    clients): the eval before, the first start's deadline, the groups already trained.
    Returns (eval before or None, seconds left or None, groups left or None)."""
    before_file = out / "eval-before-val.json"
    before = json.loads(before_file.read_text()) if before_file.is_file() else None
    seconds = None
    if args.minutes is not None:
        marker = out / "train-started"
        if not marker.is_file():
            marker.write_text(f"{time.time()}\n")
        seconds = max(0.0, float(marker.read_text()) + args.minutes * 60 - time.time())
    groups = args.groups
    rollouts = out / "rollouts.jsonl"
    if groups is not None and rollouts.is_file():
        done = {r["group_id"] for r in map(json.loads, rollouts.read_text().splitlines())
                if r.get("trained")}
        groups = max(0, groups - len(done))
    return before, seconds, groups


async def _train(args: argparse.Namespace, env: Environment, target: str, out: Path,
                 summary: dict[str, Any]) -> None:
    before, seconds, groups = _resumed(out, args)
    records = _Records(out / "rollouts.jsonl")
    config = _runner_config(args, training=True)
    summary["runner"] = _jsonable(asdict(config))
    split: Split = "val"
    try:
        async with AsyncSwarmClient(target, api_key=args.api_key) as client:
            async with Runner(env, client, config, on_record=records) as runner:
                if args.eval_split != "none":
                    summary["eval_before"] = before or _write_eval(
                        out, f"before-{split}", await runner.evaluate(split, limit=args.eval_limit))
                if seconds != 0.0 and groups != 0:
                    report = await runner.train(groups=groups, seconds=seconds)
                    summary["train"] = report.as_dict()
                    print(f"trained: {report.groups} groups, {report.rollouts} rollouts, "
                          f"{report.groups_aborted} groups aborted, "
                          f"{report.skipped_held_out} held-out items skipped", file=sys.stderr)
                else:
                    summary["train"] = {"note": "the budget was spent before a restart"}
                if args.eval_split != "none":
                    summary["eval_after"] = after = _write_eval(
                        out, f"after-{split}", await runner.evaluate(split, limit=args.eval_limit))
                    rate = "success_rate" if "success_rate" in after else "mean_reward"
                    first = summary["eval_before"].get(rate)
                    if first is not None and after.get(rate) is not None:
                        summary["gain"] = round(after[rate] - first, 4)
    finally:
        records.close()


async def _eval(args: argparse.Namespace, env: Environment, target: str, out: Path,
                summary: dict[str, Any]) -> None:
    records = _Records(out / "rollouts.jsonl")
    config = _runner_config(args, training=False)
    summary["runner"] = _jsonable(asdict(config))
    try:
        async with AsyncSwarmClient(target, api_key=args.api_key) as client:
            async with Runner(env, client, config, on_record=records) as runner:
                report = await runner.evaluate(args.split, k=args.k, limit=args.limit)
                summary["eval"] = _write_eval(out, args.split, report)
    finally:
        records.close()


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _main(command: str, argv: Sequence[str]) -> int:
    args = _parser(command).parse_args(argv)
    try:
        env = load_environment(args.env, parse_env_args(args.env_arg))
    except (ValueError, TypeError, ImportError) as err:
        print(f"swarmrl {command}: {err}", file=sys.stderr)
        return 2
    out = _out_dir(args, env)
    done = out / "summary.json"
    if command == "train" and args.target and done.is_file() and "train" in json.loads(
            done.read_text()):
        print(f"{out} already finished", file=sys.stderr)  # a restarted study client
        return 0
    train_options = _train_options(args) if command == "train" else None
    summary: dict[str, Any] = {
        "command": ["swarmrl", command, *argv], "env": args.env, "env_label": env.label,
        "env_args": parse_env_args(args.env_arg), "env_describe": _jsonable(env.describe()),
        "target": args.target, "model": None if args.target else args.model,
        "engine": None if args.target else args.engine, "train_options": train_options}
    # SIGTERM (a stopped run) unwinds like Ctrl-C, so a started server is stopped too.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    t0 = time.monotonic()
    server = _server(args, out, train_options)
    try:
        play = _train if command == "train" else _eval
        asyncio.run(play(args, env, server.target, out, summary))
    finally:
        server.stop()
        summary["seconds"] = round(time.monotonic() - t0, 1)
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out / 'summary.json'}", file=sys.stderr)
    return 0


def train_main(argv: Sequence[str]) -> int:
    """``swarmrl train``."""
    return _main("train", argv)


def eval_main(argv: Sequence[str]) -> int:
    """``swarmrl eval``."""
    return _main("eval", argv)
