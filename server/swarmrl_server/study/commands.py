"""One run's command lines: the template, its overrides and the run's ports and paths.

The server command is the template's command, then ``--port``, ``--http-port`` and
``--data-dir`` (the study owns these: every run gets free ports, kept across
restarts so that detached clients reconnect, and its own data dir, so that a
restarted server resumes from its checkpoint), then the flags and the train
options with the run's overrides applied, then ``--train-option seed=S`` and, with a
step budget, ``--train-option max_steps=N`` (unless the study sets them).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from dataclasses import dataclass
from pathlib import Path

from swarmrl_server.study.schema import RunSpec, Study, StudyError, Value

MANAGED_FLAGS = ("port", "http-port", "data-dir")
"""Flags the study sets itself."""


@dataclass(frozen=True)
class Ports:
    grpc: int
    http: int

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.grpc}"


@dataclass(frozen=True)
class ProcessSpec:
    """A process to supervise: its name (``server``, ``CLIENT#i``), argv and extra env."""

    name: str
    argv: list[str]
    env: dict[str, str]


def flag_argv(flags: dict[str, Value]) -> list[str]:
    """``{name: value}`` as ``--name value``: true is the bare flag, false/null leave it
    out, a list repeats it."""
    out: list[str] = []
    for name, value in flags.items():
        values = value if isinstance(value, list) else [value]
        for v in values:
            if v is True:
                out.append(f"--{name}")
            elif v is not False and v is not None:
                out += [f"--{name}", _text(v)]
    return out


def _text(value: Value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def server_settings(study: Study, overrides: dict[str, Value]
                    ) -> tuple[dict[str, Value], dict[str, str]]:
    """The template's flags and train options with the overrides applied."""
    flags: dict[str, Value] = dict(study.server.flags)
    train = {k: _text(v) for k, v in study.server.train_options.items()}
    for key, value in overrides.items():
        kind, _, rest = key.partition(".")
        if kind == "server":
            flags[rest] = value
        elif kind == "train":
            train[rest] = _text(value)
    return flags, train


def placeholders(spec: RunSpec, run_dir: Path, ports: Ports, replica: int = 0) -> dict[str, str]:
    return {"python": sys.executable, "target": ports.target,
            "http_url": f"http://127.0.0.1:{ports.http}/v1", "run_dir": str(run_dir),
            "data_dir": str(run_dir / "data"), "run_id": spec.run_id, "seed": str(spec.seed),
            "replica": str(replica)}


def _render(parts: list[str], values: dict[str, str], where: str) -> list[str]:
    try:
        return [p.format_map(values) for p in parts]
    except (KeyError, ValueError, IndexError) as exc:
        raise StudyError(f"{where}: unknown placeholder {exc}; known: "
                         f"{', '.join('{' + k + '}' for k in values)}") from None


def server_process(study: Study, spec: RunSpec, run_dir: Path, ports: Ports) -> ProcessSpec:
    flags, train = server_settings(study, spec.overrides)
    train.setdefault("seed", str(spec.seed))
    if study.budget.steps and flags.get("train"):
        # The trainer keeps the step budget itself, even while no supervisor watches
        # (a killed `study run`), and stops at it exactly.
        train.setdefault("max_steps", str(study.budget.steps))
    argv = _render(study.server.command, placeholders(spec, run_dir, ports), "server.command")
    argv += ["--port", str(ports.grpc), "--http-port", str(ports.http),
             "--data-dir", str(run_dir / "data"), *flag_argv(flags)]
    for key, value in train.items():
        argv += ["--train-option", f"{key}={value}"]
    return ProcessSpec("server", argv, dict(study.server.env))


def client_processes(study: Study, spec: RunSpec, run_dir: Path, ports: Ports
                     ) -> list[ProcessSpec]:
    out: list[ProcessSpec] = []
    for i, client in enumerate(study.clients):
        args: dict[str, Value] = dict(client.args)
        prefix = f"client.{client.name}."
        args.update({k[len(prefix):]: v for k, v in spec.overrides.items()
                     if k.startswith(prefix)})
        for replica in range(client.replicas):
            values = placeholders(spec, run_dir, ports, replica)
            argv = _render(client.command, values, f"clients[{i}].command")
            argv += _render(flag_argv(args), values, f"clients[{i}].args")
            out.append(ProcessSpec(f"{client.name}#{replica}", argv, dict(client.env)))
    return out


def check_template(study: Study) -> None:
    """Placeholders of every command are known (rendered once with stand-in values)."""
    spec, ports = RunSpec("check", 0), Ports(1, 2)
    server_process(study, spec, Path("run"), ports)
    client_processes(study, spec, Path("run"), ports)


def check_server(study: Study, overrides: dict[str, Value], where: str) -> None:
    """Parses the run's server flags and train options as `swarmrl serve` would, so that
    a variation the server would refuse is refused before anything starts."""
    from swarmrl_server.cli import build_parser, config_from_args

    flags, train = server_settings(study, overrides)
    at = f"{where}: " if where else ""
    parser = build_parser()
    known = {o.lstrip("-") for a in parser._actions for o in a.option_strings}
    for name in flags:
        if name in MANAGED_FLAGS:
            raise StudyError(f"{at}server flag --{name} is set by the study itself")
        if name not in known or name in ("help", "h"):
            raise StudyError(f"{at}unknown server flag --{name}")
    argv = flag_argv(flags) + [a for k, v in train.items() for a in ("--train-option", f"{k}={v}")]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            config = config_from_args(parser.parse_args(argv))
    except SystemExit as exc:
        message = err.getvalue().strip().splitlines()[-1:] or [str(exc.code)]
        raise StudyError(f"{at}server flags refused: {message[0]}") from None
    except argparse.ArgumentError as exc:
        raise StudyError(f"{at}server flags refused: {exc}") from None
    if train:
        from swarmrl_server.trainer.config import TrainerConfigError
        from swarmrl_server.trainer.setup import options_per_model

        try:
            options_per_model(config.train_options, [m.name for m in config.models])
        except TrainerConfigError as exc:
            raise StudyError(f"{at}train option refused: {exc}") from None
