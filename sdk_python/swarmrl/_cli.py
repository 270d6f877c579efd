"""The ``swarmrl`` command: ``serve`` (the server, an optional extra), ``status``, ``run``,
``train`` and ``eval`` (an environment against a server), ``compare`` (two evaluations,
paired), and the observability commands
``top``, ``plot`` and ``view``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata

from swarmrl._config import DEFAULT_TARGET, ClientConfig
from swarmrl._errors import PermissionDeniedError, SwarmError, UnimplementedError
from swarmrl._retry import RetryPolicy
from swarmrl._sync import SwarmClient
from swarmrl._types import ClientList, ServerStatus
from swarmrl._version import __version__

_DESCRIPTION = "Train LLM agents with reinforcement learning while the agents run anywhere."
_EPILOG = """\
examples:
  swarmrl serve --model tiny                 # a server with a tiny model on 127.0.0.1:50051
  swarmrl status --target gpu-box:50051      # what a server hosts and how busy it is
  swarmrl serve --help                       # every server option
  swarmrl train my_env:MyEnv --minutes 30    # train a model on your environment
  swarmrl eval my_env:MyEnv --split test     # evaluate one
  swarmrl compare runs/base runs/trained     # two evaluations of the same items, paired
  swarmrl top                                # live console of a running server
  swarmrl plot runs/a runs/b                 # PNGs of training runs, overlaid
  swarmrl view runs/a/data                   # episode viewer, offline, from a data dir

`swarmrl status` reads SWARMRL_TARGET and SWARMRL_API_KEY when its options are not given.
"""
_SERVER_MISSING = "the server needs: pip install 'swarmrl[server]'"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="swarmrl",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"swarmrl {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    # `serve` is dispatched before parsing (its options belong to the server's own parser);
    # it is registered here so that it shows in --help.
    commands.add_parser(
        "serve", help="run a swarm server: host models, record episodes, train on them"
    )
    status = commands.add_parser(
        "status",
        help="show a server's status and models",
        description="Show a swarm server's status and the models it hosts.",
    )
    status.add_argument(
        "--target",
        default=os.environ.get("SWARMRL_TARGET", DEFAULT_TARGET),
        help="server address, HOST:PORT (default: $SWARMRL_TARGET or %(default)s)",
    )
    status.add_argument(
        "--api-key",
        default=os.environ.get("SWARMRL_API_KEY"),
        help="API key (default: $SWARMRL_API_KEY)",
    )
    status.add_argument("--tls", action="store_true", help="connect with TLS")
    status.add_argument(
        "--wait",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long to wait for an unreachable server (default: %(default)s)",
    )
    # `run` is dispatched before parsing too (everything after `--` is the agent's command).
    commands.add_parser("run", help="run an agent command in episodes and report its reward")
    # Dispatched before parsing as well: each has its own parser (see `COMMAND --help`).
    commands.add_parser("train", help="train a model on an environment (swarmrl.envs)")
    commands.add_parser("eval", help="evaluate a model on a split of an environment")
    commands.add_parser("compare", help="compare two evaluations of the same items, paired")
    commands.add_parser("top", help="live console: models, trainer, clients, episodes, errors")
    commands.add_parser("plot", help="PNGs of training runs (reward, loss, merge, throughput)")
    commands.add_parser("view", help="token-level episode viewer in the browser")
    commands.add_parser("study", help="run, heal, compare and report many training runs")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``swarmrl`` console script; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "run":
        from swarmrl._run import main as run_main

        return run_main(args[1:])
    if args and args[0] in ("train", "eval"):
        from swarmrl.envs._cli import eval_main, train_main

        return (train_main if args[0] == "train" else eval_main)(args[1:])
    if args and args[0] == "compare":
        from swarmrl.envs._compare import compare_main

        return compare_main(args[1:])
    if args and args[0] == "top":
        from swarmrl._top import main as top_main

        return top_main(args[1:])
    if args and args[0] in _SERVER_COMMANDS:
        return _server_command(args[0], args[1:])
    parsed = _parser().parse_args(args)
    if parsed.command == "status":
        return _status(parsed.target, parsed.api_key, parsed.tls, parsed.wait)
    _parser().print_help()
    return 2


COMMAND_GROUP = "swarmrl.commands"
"""Entry-point group of the commands that run server code (the server, matplotlib, the
store, tokenizers). The server's distribution registers them (pyproject.toml), so the SDK
neither imports nor names the server package: it only knows the commands' names."""

_SERVER_COMMANDS = ("serve", "plot", "view", "study")


def _server_command(name: str, argv: list[str]) -> int:
    found = metadata.entry_points(group=COMMAND_GROUP, name=name)
    try:
        # An SDK-only install has the entry point but not the server's dependencies.
        # Loaded only when the command runs: `swarmrl status` never pays for torch.
        command = next(iter(found)).load()
    except (StopIteration, ImportError) as err:
        detail = f" ({err})" if isinstance(err, ImportError) else ""
        print(f"swarmrl: {_SERVER_MISSING}{detail}", file=sys.stderr)
        return 2
    result = command(argv)
    return result if isinstance(result, int) else 0


def _status(target: str, api_key: str | None, tls: bool, wait: float) -> int:
    config = ClientConfig(
        target=target,
        api_key=api_key or None,
        tls=tls,
        retry=RetryPolicy(timeout=wait),
        call_timeout=max(wait, 1.0),
    )
    clients: ClientList | None = None
    try:
        with SwarmClient(config=config) as client:
            status = client.status()
            try:
                clients = client.list_clients()
            except (PermissionDeniedError, UnimplementedError):  # no admin key; an older server
                pass
    except SwarmError as err:
        print(f"swarmrl: {target}: {err}", file=sys.stderr)
        return 1
    print(_format_status(target, status))
    if clients is not None:
        print("\n" + _format_clients(clients))
    return 0


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def _format_clients(clients: ClientList) -> str:
    """Live clients, then every agent version's episodes (a swapped-out client's too)."""
    def listed(values: list[str], most: int = 3) -> str:
        shown = ",".join(v or "-" for v in values[:most])
        return shown + (f",+{len(values) - most}" if len(values) > most else "")

    rows: list[tuple[str, ...]] = [
        ("CLIENT", "SESSION", "AGENT", "TASKS", "MODELS", "OPEN", "ENDED", "ABORTED")]
    rows += [
        (c.client_name, c.session_id[:12], listed(c.episode_agent_versions or [c.agent_version]),
         listed(c.tasks), listed(c.models), str(c.open_episodes), str(c.ended_episodes),
         str(c.aborted_episodes))
        for c in clients.clients
    ]
    lines = _table(rows) if clients.clients else ["no clients attached"]
    rows = [("AGENT VERSION", "OPEN", "ENDED", "ABORTED", "TRAINED", "MEAN REWARD")]
    rows += [
        (v.agent_version or "-", str(v.open_episodes), str(v.ended_episodes),
         str(v.aborted_episodes), str(v.consumed_episodes), f"{v.mean_reward:.3f}")
        for v in clients.agent_versions
    ]
    return "\n".join(lines + [""] + _table(rows))


def _format_status(target: str, status: ServerStatus) -> str:
    episodes = (
        f"{status.open_episodes} open, {status.ended_episodes} ended, "
        f"{status.aborted_episodes} aborted"
    )
    lines = [
        f"server    {target} (instance {status.server_instance})",
        f"sessions  {status.sessions}",
        f"episodes  {episodes}",
        f"paused    {'yes' if status.paused else 'no'}",
        f"events    last sequence {status.last_event_sequence}",
        "",
    ]
    header = ("MODEL", "VERSION", "CONTEXT", "VOCAB", "TRAINABLE", "SOURCE")
    rows = [header] + [
        (
            m.name,
            str(m.policy_version),
            str(m.max_model_len),
            str(m.vocab_size),
            "yes" if m.trainable else "no",
            m.source,
        )
        for m in status.models
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
