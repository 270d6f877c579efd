"""``swarmrl train ENV`` and ``swarmrl eval ENV``: an environment against a swarm server.

Both either start a server (``--model``, ``--engine``, ``--train-option``, ``--server-arg``;
stopped at the end) or attach to a running one (``--target``). Everything a run writes
goes to ``--out``: ``rollouts.jsonl`` (one record per rollout, train and eval) and the run
card, ``card.json`` + ``card.md`` (`_card`). ``swarmrl train`` follows `_flow`: val before
on a pinned version, training, val after, the best checkpoint by val, test once on it.

An attached ``swarmrl train`` (``--target``, e.g. a study's client) started again on the
same ``--out`` resumes: it keeps its evaluations so far, its first start's deadline and
the groups it trained, and once finished plays nothing more.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Coroutine, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from swarmrl._client import AsyncSwarmClient
from swarmrl._config import ClientConfig
from swarmrl._sampling import SamplingParams
from swarmrl.envs import _card, _runfolder
from swarmrl.envs._api import Environment
from swarmrl.envs._failures import RunStopped
from swarmrl.envs._flow import EmptySplit, evaluate_once, splits_record, train_and_test
from swarmrl.envs._load import load_environment, parse_env_args
from swarmrl.envs._report import RolloutRecord
from swarmrl.envs._runner import Runner, RunnerConfig
from swarmrl.envs._server import ServerProcess, wait_gone

__all__ = ["eval_main", "train_main"]

_ENV_HELP = """\
ENV names the environment:
  package.module:attr     a swarmrl.envs.Environment, or a class or function making one
                          (called with the --env-arg values as keyword arguments)
  path/to/file.py:attr    the same, from a file
  verifiers:ID            a verifiers environment (swarmrl.envs.verifiers)
  openenv:SPEC            an OpenEnv environment (swarmrl.envs.openenv)
"""

DEFAULT_LEASE_S = 60.0
"""The default ``--lease``. A training hold is bound to the session, so the lease is how
long a dead client stops training on its server; a lease that lapses while the client
lives (its heartbeats stalled) costs the run its open episodes. 60 s is renewed every
20 s, so two renewals in a row may fail (a loaded machine, a server restart) first."""


def _lease(text: str) -> float:
    """``--lease``: seconds, within the range the server grants (it clamps to 1-600)."""
    value = float(text)
    if not 1.0 <= value <= 600.0:
        raise argparse.ArgumentTypeError(f"{text}: expected 1 to 600 seconds")
    return value


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
                        help="another `swarmrl serve` argument (repeatable; join it with "
                             "'=' when it starts with a dash)")
    server.add_argument("--lease", type=_lease, default=DEFAULT_LEASE_S, metavar="SECONDS",
                        help="this client's session lease, renewed every third of it: what "
                             "the server waits, after the client stops renewing (killed, "
                             "cut off), before it aborts the run's open episodes and drops "
                             "its training holds (1-600; default: %(default)s)")
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
            description="Train a model on an environment: evaluate val (each evaluation on "
                        "one pinned policy version), play GRPO groups for --minutes or "
                        "--groups, evaluate val again, then test once on the best "
                        "checkpoint by val. Writes rollouts.jsonl and a run card "
                        "(card.json, card.md) into --out.",
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
        p.add_argument("--val", action=argparse.BooleanOptionalAction, default=True,
                       help="evaluate val before, after and every --eval-every versions "
                            "(pinned), checkpointing each evaluated version")
        p.add_argument("--eval-every", type=int, default=0, metavar="N",
                       help="also evaluate val every N policy versions (0: only before and "
                            "after)")
        p.add_argument("--eval-limit", type=int, help="evaluate only the first N val items")
        p.add_argument("--test", action=argparse.BooleanOptionalAction, default=True,
                       help="at the end, serve the best checkpoint by val and evaluate test "
                            "on it, once (--no-test while choosing settings)")
        p.add_argument("--from-card", type=Path, metavar="CARD",
                       help="repeat the run a card.json records (with a new --out)")
    else:
        p.add_argument("--split", choices=("val", "test"), default="val",
                       help="the split to evaluate (default: val)")
        p.add_argument("--k", type=int, default=1,
                       help="rollouts per item (k > 1 samples at --temperature; pass@k)")
        p.add_argument("--temperature", type=float, default=1.0,
                       help="sampling temperature when --k > 1 (k = 1 is greedy)")
        p.add_argument("--limit", type=int, help="evaluate only the first N items")
        p.add_argument("--checkpoint", type=Path, metavar="PATH",
                       help="evaluate this checkpoint (a step-N folder a training server "
                            "wrote), served again as a pinned version: restored on the "
                            "--target server (a path on its machine, under its data dir), "
                            "or served by the started server from its start (--resume)")
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


def _server(args: argparse.Namespace, out: Path, train_options: dict[str, str] | None, *,
            previous: dict[str, Any] | None) -> ServerProcess:
    """The server of the run: attached, or started on ``OUT/data``. A resumed train run
    starts its server again on the same data dir, which resumes training from its latest
    checkpoint as any restart does (steps after it are trained again from their
    episodes, which the data dir keeps); ``eval --checkpoint PATH`` starts one that
    resumes from PATH (``swarmrl serve --resume``)."""
    if args.target:
        return ServerProcess(args.target)
    data_dir = out / "data"
    extra = list(args.server_arg)
    if data_dir.exists() and any(data_dir.iterdir()):
        if previous is None:
            raise SystemExit(f"{data_dir} is not empty: pick a new --out")
        pid = previous.get("server", {}).get("pid")
        if pid and not wait_gone(int(pid), data_dir.resolve()):
            raise SystemExit(f"the server this run started before (pid {pid}) still runs on "
                             f"{data_dir}: stop it, then start the run again")
    checkpoint = getattr(args, "checkpoint", None)
    if checkpoint is not None:
        extra += ["--resume", str(checkpoint)]
    server = ServerProcess.start(model=args.model, engine=args.engine,
                                 train_options=train_options, data_dir=data_dir,
                                 log_path=out / "server.log", extra_args=extra)
    print(f"server on {server.target}; its log: {server.log_path}", file=sys.stderr)
    return server


def _train_options(args: argparse.Namespace) -> dict[str, str]:
    """The started server's train options: the given ones, with group_size from
    --group-size. The checkpoints evaluations save are kept outside the trainer's
    keep_checkpoints; the run deletes those it no longer needs (`_flow.prune_checkpoints`)."""
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


def _runner_config(args: argparse.Namespace, *, training: bool, holder: str) -> RunnerConfig:
    sampling = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens,
                              top_p=getattr(args, "top_p", None))
    return RunnerConfig(
        group_size=getattr(args, "group_size", 1), concurrency=args.concurrency,
        rollout_timeout_s=args.rollout_timeout, retries=args.retries, sampling=sampling,
        eval_sampling=SamplingParams(temperature=0.0, max_tokens=args.max_tokens),
        model=args.policy_model, seed=getattr(args, "seed", 0), progress=args.progress,
        agent_version="swarmrl-train" if training else "swarmrl-eval", holder=holder)


class UsageError(ValueError):
    """The run cannot go as asked (found before anything is played)."""


async def _check_group_size(client: AsyncSwarmClient, args: argparse.Namespace) -> None:
    """An attached train run's --group-size must be the server trainer's group_size:
    groups of another size would be cut differently by the trainer."""
    for info in await client.list_models():
        if args.policy_model and info.name != args.policy_model:
            continue
        if info.group_size and info.group_size != args.group_size:
            raise UsageError(f"--group-size {args.group_size} differs from the group_size "
                             f"{info.group_size} of {info.name!r} on {args.target}: pass "
                             f"--group-size {info.group_size}")
        return


def _server_record(args: argparse.Namespace, out: Path, train_options: dict[str, str] | None
                   ) -> dict[str, Any]:
    if args.target:
        return {"attached": args.target, "summary": {"target": args.target}}
    effective = {}
    for path in sorted((out / "data").glob("trainer-config-*.json")):
        effective[path.stem.removeprefix("trainer-config-")] = json.loads(path.read_text())
    return {"model": args.model, "engine": args.engine or "hf (default)",
            "server_args": list(args.server_arg), "train_options_given": train_options,
            "train_options": effective,
            "summary": {"model": args.model, "engine": args.engine or "hf"}}


async def _play(args: argparse.Namespace, command: str, env: Environment, target: str,
                out: Path, card: dict[str, Any]) -> None:
    records = _Records(out / "rollouts.jsonl")
    config = _runner_config(args, training=command == "train",
                            holder=card.get("holder") or _runfolder.holder(out))
    card["runner"] = json.loads(json.dumps(asdict(config), default=str))
    card["client"] = {"session_lease": args.lease}

    def save() -> None:
        _card.write(out, card)

    try:
        client_config = ClientConfig(target=target, api_key=args.api_key,
                                     session_lease=args.lease)
        async with AsyncSwarmClient(config=client_config) as client:
            if command == "train" and args.target:
                await _check_group_size(client, args)
            async with Runner(env, client, config, on_record=records) as runner:
                if command == "train":
                    await train_and_test(
                        runner, card, save,
                        budget=_runfolder.budget(card, args.minutes, args.groups),
                        eval_every=args.eval_every, eval_limit=args.eval_limit,
                        val=args.val, test=args.test)
                else:
                    card["splits"] = splits_record(
                        runner, args.split == "test",
                        needed=((args.split, "evaluate the other split, or give the "
                                             "environment items for this one"),))
                    await _evaluate(runner, args, card)
    finally:
        records.close()


async def _evaluate(runner: Runner, args: argparse.Namespace, card: dict[str, Any]) -> None:
    """``swarmrl eval``: one pinned evaluation; with ``--checkpoint`` on an attached
    server, of that checkpoint served again as a new policy version (a started server
    serves it from its start: ``--resume``)."""
    async with runner.pinned(f"{args.split} evaluation") as version:
        if args.checkpoint is not None:
            record: dict[str, Any] = {"path": str(args.checkpoint)}
            if args.target:
                version = await runner.restore(str(args.checkpoint))
                record["restored_as_version"] = version
            else:
                record["served_from_start_as_version"] = version
            card["checkpoint"] = record
        card["evals"].append(await evaluate_once(
            runner, args.split, args.split, limit=args.limit, k=args.k))


def _from_card(command: str, argv: Sequence[str]) -> list[str]:
    """``--from-card CARD [--out DIR]``: the card's own arguments, with a new --out, and
    every train option the card's server recorded (defaults included) that its arguments
    did not name, pinned as ``--train-option KEY=VALUE``: a default changed since (as
    weight_sync's did) must not change the repeated run."""
    p = argparse.ArgumentParser(prog=f"swarmrl {command} --from-card")
    p.add_argument("--from-card", type=Path, required=True)
    p.add_argument("--out", type=Path)
    known, rest = p.parse_known_args(argv)
    if rest:
        raise SystemExit(f"swarmrl {command} --from-card takes only --out, not {rest}")
    card = json.loads(known.from_card.read_text())
    if card.get("kind") != command:
        raise SystemExit(f"{known.from_card} is a {card.get('kind')} card, not a {command} card")
    old = list(card["argv"])
    if "--out" in old:
        i = old.index("--out")
        del old[i:i + 2]
    old = [a for a in old if not a.startswith("--out=")]
    out = known.out or Path("runs") / f"{card['env']['label']}-{time.strftime('%Y%m%d-%H%M%S')}"
    return [*old, *_pinned_train_options(card, _parser(command).parse_args(old)),
            "--out", str(out)]


def _pinned_train_options(card: dict[str, Any], args: argparse.Namespace) -> list[str]:
    """``--train-option`` pairs for the recorded effective options `args` does not name."""
    recorded = card.get("server", {}).get("train_options") or {}
    if len(recorded) != 1:  # attached (none recorded), or not one trained model
        return []
    given = {pair.partition("=")[0] for pair in getattr(args, "train_option", [])}

    def text(value: Any) -> str:
        if value is None:
            return "none"
        return str(value).lower() if isinstance(value, bool) else str(value)

    (options,) = recorded.values()
    return [a for key, value in sorted(options.items()) if key not in given
            for a in ("--train-option", f"{key}={text(value)}")]


class ServerExited(RuntimeError):
    """The server this command started exited during the run."""


async def _while_alive(server: ServerProcess, play: Coroutine[Any, Any, None]) -> None:
    """Runs `play` while the server this command started lives. If the server exits (a
    crash, the OOM killer), `play` is cancelled and `ServerExited` names the server's log
    and how it ended: its rollouts would otherwise retry a dead address until each one
    timed out."""
    task = asyncio.ensure_future(play)
    while not (await asyncio.wait([task], timeout=1.0))[0]:
        if not server.alive():
            task.cancel()
            # Aborts sent to a dead server fail fast; asyncio.run cancels what is left.
            await asyncio.wait([task], timeout=3.0)
            raise ServerExited(f"the server exited during the run ({server.exit_reason()}); "
                               f"see {server.log_path}")
    task.result()


def _checkpoint_options(path: Path) -> dict[str, str]:
    """Train options a server started to serve checkpoint `path` needs to load it: its
    LoRA settings (a LoRA checkpoint is an adapter, loaded into an adapter of its rank)."""
    state_file = path / "trainer_state.json"
    if not state_file.is_file():
        raise UsageError(f"--checkpoint {path}: not a checkpoint directory (no "
                         f"{state_file.name}); a checkpoint is a step-N folder under "
                         "DATA_DIR/checkpoints/MODEL")
    config = json.loads(state_file.read_text()).get("config", {})
    return {key: str(config[key]) for key in ("lora_rank", "lora_alpha") if config.get(key)}


def _resumable(command: str, out: Path, previous: dict[str, Any] | None) -> str | None:
    """Why `out` cannot be (re)used by this command; None when it can. ``swarmrl eval``
    never resumes (an evaluation is played whole or again in a new folder)."""
    if previous is None:
        return None
    if command == "eval":
        return f"{out} holds a {previous.get('kind')} run already: pick a new --out"
    if previous.get("kind") != "train":
        return f"{out} holds a {previous.get('kind')} run, not a train run: pick a new --out"
    return None


def _main(command: str, argv: Sequence[str]) -> int:
    argv = list(argv)
    if any(a == "--from-card" or a.startswith("--from-card=") for a in argv):
        argv = _from_card(command, argv)
    args = _parser(command).parse_args(argv)
    try:
        env = load_environment(args.env, parse_env_args(args.env_arg))
    except (ValueError, TypeError, ImportError) as err:
        print(f"swarmrl {command}: {err}", file=sys.stderr)
        return 2
    out: Path = args.out or Path("runs") / f"{env.label}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    previous = _card.read(out)
    refused = _resumable(command, out, previous)
    if refused:
        print(f"swarmrl {command}: {refused}", file=sys.stderr)
        return 2
    if previous and (previous.get("finished") or "test" in previous):
        print(f"{out} already finished", file=sys.stderr)  # a restarted study client
        return 0
    card = _card.base(command, argv, args.env, env.label, parse_env_args(args.env_arg),
                      env.describe())
    try:
        if command == "train":
            _runfolder.carry_over(previous, card, out, argv)
            train_options: dict[str, str] | None = _train_options(args)
        else:
            train_options = None if args.checkpoint is None or args.target else \
                _checkpoint_options(args.checkpoint)
    except UsageError as err:
        print(f"swarmrl {command}: {err}", file=sys.stderr)
        return 2
    # SIGTERM (a stopped run) unwinds like Ctrl-C, so a started server is stopped too.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    t0 = time.monotonic()
    server = _server(args, out, train_options, previous=previous)
    card["server"] = _server_record(args, out, train_options)
    if server.proc is not None:
        card["server"]["pid"] = server.proc.pid
        _card.write(out, card)  # the pid, for a start after a kill to wait on
    card["packages"] = _card.package_versions(None if args.target else args.engine)
    code = 0
    try:
        asyncio.run(_while_alive(server, _play(args, command, env, server.target, out, card)))
    except ServerExited as err:
        print(f"swarmrl {command}: {err}", file=sys.stderr)
        code = 1
    except RunStopped as err:
        # An error every rollout would meet: retrying would only spend the budget.
        print(f"swarmrl {command}: {err}", file=sys.stderr)
        card["stopped"] = {"error": f"{type(err.cause).__name__}: {err.cause}",
                           "item": err.item.id, "split": err.split}
        code = 1
    except (UsageError, EmptySplit) as err:
        print(f"swarmrl {command}: {err}", file=sys.stderr)
        card["refused"] = str(err)
        code = 2
    finally:
        server.stop()
        card["wall_s"] = round(time.monotonic() - t0, 1)
        if card.get("starts"):
            card["starts"][-1]["wall_s"] = card["wall_s"]
        _card.write(out, card)
    print(f"wrote {out / 'card.json'} and card.md", file=sys.stderr)
    return code


def train_main(argv: Sequence[str]) -> int:
    """``swarmrl train``."""
    return _main("train", argv)


def eval_main(argv: Sequence[str]) -> int:
    """``swarmrl eval``."""
    return _main("eval", argv)
