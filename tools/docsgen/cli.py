"""Every command and option of `swarmrl`, from the argparse parsers themselves.

The SDK's commands are `swarmrl._cli` (status), `swarmrl._run` (run), `swarmrl.envs._cli`
(train, eval) and `swarmrl._top` (top); the server's are the `swarmrl.commands` entry points in pyproject.toml, each a
module whose `build_parser()` is the parser its `main` parses with.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator

import tomllib

from tools.docsgen import REPO, cell, table


def server_commands() -> dict[str, str]:
    """name -> module of the `swarmrl.commands` entry points (pyproject.toml)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    group = project["project"]["entry-points"]["swarmrl.commands"]
    return {name: target.split(":")[0] for name, target in group.items()}


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(command, parser) for `swarmrl` and each of its commands, subcommands included."""
    from swarmrl import _cli, _run, _top
    from swarmrl.envs import _cli as envs_cli
    from swarmrl.envs import _compare

    top = _cli._parser()
    yield "swarmrl", top
    found: dict[str, argparse.ArgumentParser] = {
        "run": _run.build_parser(),
        "top": _top.build_parser(),
        "train": envs_cli._parser("train"),
        "eval": envs_cli._parser("eval"),
        "compare": _compare._parser(),
    }
    for name, choice in _subparsers(top):
        if choice._actions[1:]:  # status has options of its own; the rest are dispatched
            found[name] = choice
    for name, module in server_commands().items():
        found[name] = importlib.import_module(module).build_parser()
    for name in sorted(found):
        yield from _walk(f"swarmrl {name}", found[name])


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _walk(name: str, parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for sub, choice in _subparsers(parser):
        yield from _walk(f"{name} {sub}", choice)


def option_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str, str]]:
    """(option strings or positional name, default, help with %(...)s expanded)."""
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings:
            names = ", ".join(action.option_strings)
            if action.nargs != 0:
                names += " " + formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
        else:
            names = formatter._format_args(action, formatter._get_default_metavar_for_positional(action))
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else repr(default)
        rows.append((names, shown, formatter._expand_help(action) if action.help else ""))
    return rows


def render() -> str:
    out = [
        "# Command line\n",
        "Generated from the argparse parsers when the site is built: every command, "
        "subcommand and option, with the help text `--help` prints. The server's commands "
        "(`serve`, `plot`, `view`, `study`) are the `swarmrl.commands` entry points in "
        "`pyproject.toml`; they need `pip install 'swarmrl[server]'`. The trainer's "
        "`--train-option KEY=VALUE` keys are on [their own page](train-options.md).\n",
    ]
    for name, parser in parsers():
        level = "#" * min(2 + max(name.count(" ") - 1, 0), 4)
        out.append(f"{level} `{name}`\n")
        if parser.description:
            out.append(parser.description.strip() + "\n")
        out.append("```text\n" + parser.format_usage().strip() + "\n```\n")
        subs = list(_subparsers(parser))
        if subs:
            rows: list[list[object]] = [[f"`{n}`", _help_of(parser, n)] for n, _ in subs]
            out.append(table(["command", "what it does"], rows))
        rows = [[f"`{names}`", f"`{default}`" if default else "", help_]
                for names, default, help_ in option_rows(parser)]
        if rows:
            out.append(table(["option", "default", "help"], rows))
        if parser.epilog:
            out.append("```text\n" + parser.epilog.strip() + "\n```\n")
    return "\n".join(out)


def _help_of(parser: argparse.ArgumentParser, name: str) -> str:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                if choice.dest == name or choice.metavar == name:
                    return cell(choice.help or "")
    return ""
