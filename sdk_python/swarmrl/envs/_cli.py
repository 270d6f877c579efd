"""``swarmrl train ENV`` and ``swarmrl eval ENV``: an environment against a swarm server.

Both either start a server (``--model``, ``--engine``, ``--train-option``, ``--server-arg``;
stopped at the end, and dying with the command if it is killed) or attach to a running one
(``--target``). Everything a run writes goes to ``--out``: ``rollouts.jsonl`` (one record
per rollout attempt, train and eval) and the run card, ``card.json`` + ``card.md``
(`_card`). ``swarmrl train`` follows `_flow`: val before on a pinned version, training,
val after, the best checkpoint by val, test once on it.

Before anything is played, a run is refused (exit 2, the card says why) when an attached
server's trainer groups another ``group_size`` than ``--group-size``, or when a split it
would evaluate has no items. An error every rollout would meet (`RunStopped`: a bug in
the environment's ``play()``, a server refusing the run's options, ``--max-failures``
rollouts failed in a row) stops the run at once: exit 1, the error and its item printed
and recorded (``card["stopped"]``), a started server stopped.

The client's session lease is ``--lease`` (`DEFAULT_LEASE_S`): training holds are bound
to the session, so it is also how long a killed run's hold outlives it.

Roles (`swarmrl.envs._roles`): ``--role NAME=MODEL[:frozen]`` maps an environment's roles
to the server's models (every trained one's group size checked, every played one pinned
for each evaluation); with ``--role-base SOURCE`` the started server serves each named
model as its own LoRA adapter of that one base. The card records each role's model,
whether it is frozen, and each evaluation's version of every model.

``swarmrl train`` started again on the same ``--out`` resumes (`_runfolder`), attached or
not: with a started server, a server is started again on the folder's data dir (once the
killed run's own is gone), which resumes training from its latest checkpoint. A finished
run plays nothing more. ``swarmrl eval`` does not resume: it refuses a folder that holds
a run. ``swarmrl eval --checkpoint PATH`` evaluates a checkpoint a training server wrote;
``--role-checkpoint MODEL=PATH`` (attached) restores several models' at once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import sys
import time
from collections.abc import Coroutine, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from swarmrl._client import AsyncSwarmClient
from swarmrl._config import ClientConfig
from swarmrl._errors import FailedPreconditionError, InvalidArgumentError
from swarmrl._sampling import SamplingParams
from swarmrl.envs import _card, _runfolder
from swarmrl.envs._api import Environment
from swarmrl.envs._cli_args import DEFAULT_LEASE_S, UsageError, from_card, role_models
from swarmrl.envs._cli_args import parser as _parser
from swarmrl.envs._cli_args import train_options as _train_options
from swarmrl.envs._failures import RunStopped
from swarmrl.envs._flow import EmptySplit, evaluate_once, splits_record, train_and_test
from swarmrl.envs._load import load_environment, parse_env_args
from swarmrl.envs._report import RolloutRecord
from swarmrl.envs._roles import check_roles, parse_roles, resolve
from swarmrl.envs._runner import Runner, RunnerConfig
from swarmrl.envs._server import ServerProcess, wait_gone

__all__ = ["DEFAULT_LEASE_S", "eval_main", "train_main"]

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
    model = args.model
    models = role_models(args)
    if models:  # each role's model its own adapter of the one base
        model = models[0]
        extra += [a for m in models[1:] for a in ("--model", m)]
    server = ServerProcess.start(model=model, engine=args.engine,
                                 train_options=train_options, data_dir=data_dir,
                                 log_path=out / "server.log", extra_args=extra)
    print(f"server on {server.target}; its log: {server.log_path}", file=sys.stderr)
    return server


def _runner_config(args: argparse.Namespace, *, training: bool, holder: str) -> RunnerConfig:
    sampling = SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens,
                              top_p=getattr(args, "top_p", None))
    return RunnerConfig(
        group_size=getattr(args, "group_size", 1), concurrency=args.concurrency,
        rollout_timeout_s=args.rollout_timeout, retries=args.retries, sampling=sampling,
        eval_sampling=SamplingParams(temperature=0.0, max_tokens=args.max_tokens),
        model=args.policy_model, seed=getattr(args, "seed", 0), progress=args.progress,
        agent_version="swarmrl-train" if training else "swarmrl-eval", holder=holder,
        max_consecutive_failures=args.max_failures, roles=parse_roles(args.role))


def _roles_record(env: Environment, config: RunnerConfig, args: argparse.Namespace
                  ) -> dict[str, Any]:
    """Each role's model, whether it is frozen, and (a started ``--role-base`` server) the
    base it is an adapter of; each evaluation records every model's version."""
    out: dict[str, Any] = {}
    for role, spec in resolve(env.roles, config.roles, config.model).items():
        out[role] = {"model": spec.model or "(the server's first)", "frozen": spec.frozen}
        if args.role_base and not args.target:
            out[role]["adapter_of"] = args.role_base
    return out


async def _check_group_size(client: AsyncSwarmClient, args: argparse.Namespace,
                            trained: list[str]) -> None:
    """An attached train run's --group-size must be the server trainer's group_size, of
    every model the run trains: groups of another size would be cut differently."""
    infos = await client.list_models()
    for name in trained:
        for info in infos:
            if name and info.name != name:
                continue
            if info.group_size and info.group_size != args.group_size:
                raise UsageError(f"--group-size {args.group_size} differs from the group_size "
                                 f"{info.group_size} of {info.name!r} on {args.target}: pass "
                                 f"--group-size {info.group_size}")
            break


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
    if env.roles != ("",):
        card["roles"] = _roles_record(env, config, args)
    card["client"] = {"session_lease": args.lease}

    def save() -> None:
        _card.write(out, card)

    try:
        client_config = ClientConfig(target=target, api_key=args.api_key,
                                     session_lease=args.lease)
        async with AsyncSwarmClient(config=client_config) as client:
            if command == "train" and args.target:
                await _check_group_size(client, args, config.trained_models(env))
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
                try:
                    version = await runner.restore(str(args.checkpoint))
                except (InvalidArgumentError, FailedPreconditionError) as err:
                    raise UsageError(f"--checkpoint {args.checkpoint}: {err.message}") from None
                record["restored_as_version"] = version
            else:
                record["served_from_start_as_version"] = version
            card["checkpoint"] = record
        if args.role_checkpoint:
            card["checkpoints"] = await _restore_roles(runner, args)
            version = next(iter(runner.pins.values()), version)
        card["evals"].append(await evaluate_once(
            runner, args.split, args.split, limit=args.limit, k=args.k))


async def _restore_roles(runner: Runner, args: argparse.Namespace) -> dict[str, Any]:
    """``--role-checkpoint MODEL=PATH``: each model's checkpoint served again on the
    attached server, inside the evaluation's hold (so the pair evaluated is the pair
    restored, together)."""
    record: dict[str, Any] = {}
    for pair in args.role_checkpoint:
        model, _, path = pair.partition("=")
        try:
            version = await runner.restore(path, model)
        except (InvalidArgumentError, FailedPreconditionError) as err:
            raise UsageError(f"--role-checkpoint {pair}: {err.message}") from None
        record[model] = {"path": path, "restored_as_version": version}
    return record


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
        argv = from_card(command, argv)
    args = _parser(command).parse_args(argv)
    try:
        env = load_environment(args.env, parse_env_args(args.env_arg))
    except (ValueError, TypeError, ImportError) as err:
        print(f"swarmrl {command}: {err}", file=sys.stderr)
        return 2
    try:  # a bad --role is refused before a server starts
        check_roles(env.roles, parse_roles(args.role))
        role_models(args)
    except ValueError as err:
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
            if args.checkpoint is not None and not args.target and re.fullmatch(
                    r"(step-)?\d+", str(args.checkpoint)):
                raise UsageError(
                    f"--checkpoint {args.checkpoint}: a step names a checkpoint of the "
                    "--target server; a server started here needs the checkpoint's path "
                    "(a train run's card names each evaluated one: evals[].checkpoint)")
            train_options = None if args.checkpoint is None or args.target else \
                _checkpoint_options(args.checkpoint)
            for pair in args.role_checkpoint:
                if not args.target or "=" not in pair or pair.startswith("="):
                    raise UsageError(f"--role-checkpoint {pair}: expected MODEL=PATH, with "
                                     "--target (a server serving every role's model)")
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
