"""The command lines of ``swarmrl train`` and ``swarmrl eval`` (`_cli` runs them): their
options, grouped as ``--help`` shows them, the started server's train options, and
``--from-card``, which repeats the command a card records."""

from __future__ import annotations

import argparse
import json
import os
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_LEASE_S", "UsageError", "from_card", "parser", "role_models",
           "train_options"]


class UsageError(ValueError):
    """The run cannot go as asked (found before anything is played)."""


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
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="run folder: rollouts.jsonl, card.json, card.md, and a started "
                        "server's data dir (data/) and log (default: runs/<env>-<time>)")
    server = p.add_argument_group("server (started for the run, or --target a running one)")
    server.add_argument("--target", metavar="HOST:PORT",
                        help="attach to this running server instead of starting one")
    server.add_argument("--api-key", default=os.environ.get("SWARMRL_API_KEY"),
                        help="API key for --target (default: $SWARMRL_API_KEY)")
    server.add_argument("--model", default="tiny",
                        help="the started server's --model (default: %(default)s)")
    server.add_argument("--engine", help="the started server's --engine: hf (default), "
                                         "vllm or echo")
    server.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                        help="another `swarmrl serve` argument (repeatable; join it with "
                             "'=' when it starts with a dash)")
    server.add_argument("--lease", type=_lease, default=DEFAULT_LEASE_S, metavar="SECONDS",
                        help="this client's session lease, renewed every third of it: what "
                             "the server waits, after the client stops renewing (killed, "
                             "cut off), before it aborts the run's open episodes and lifts "
                             "its training holds (1-600; default: %(default)s)")
    roles = p.add_argument_group("roles (an environment with several agents)")
    roles.add_argument("--role", action="append", default=[], metavar="NAME=MODEL[:frozen]",
                       help="the server model a role plays on (repeatable); ':frozen' serves "
                            "it, never trained; two roles on one model is self-play, each "
                            "seat with its own baseline. Roles not named play --policy-model")
    roles.add_argument("--role-base", metavar="SOURCE",
                       help="start the server with each model --role names as its own LoRA "
                            "adapter of this one base (e.g. smollm2, tiny); its lora_rank train "
                            "option is 16 unless given")
    play = p.add_argument_group("rollouts")
    play.add_argument("--policy-model", default="", metavar="NAME",
                      help="the model rollouts call (default: the server's first)")
    play.add_argument("--concurrency", type=int, default=16, metavar="N",
                      help="rollouts at once (default: %(default)s)")
    play.add_argument("--rollout-timeout", type=float, default=600.0, metavar="SECONDS",
                      help="a longer rollout fails, counted as a timeout (default: "
                           "%(default)s)")
    play.add_argument("--retries", type=int, default=1, metavar="N",
                      help="fresh attempts after a rollout failed for the environment's or "
                           "the server's reasons (default: %(default)s)")
    play.add_argument("--max-failures", type=int, default=16, metavar="N",
                      help="stop the run after N rollouts in a row failed for the "
                           "environment's or the server's reasons, retries spent (0: never; "
                           "default: %(default)s); errors that always recur stop it at once")
    play.add_argument("--max-tokens", type=int, metavar="N",
                      help="tokens per model call")
    play.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                      help="show a progress bar (default: on)")


def parser(command: str) -> argparse.ArgumentParser:
    if command == "train":
        p = argparse.ArgumentParser(
            prog="swarmrl train", formatter_class=argparse.RawDescriptionHelpFormatter,
            description=textwrap.fill(
                "Train a model on an environment: evaluate val (each evaluation on one "
                "pinned policy version), play GRPO groups for --minutes or --groups, "
                "evaluate val again, then test once on the best checkpoint by val. Writes "
                "rollouts.jsonl and a run card (card.json, card.md) into --out. Started "
                "again on the same --out, a run resumes where it stopped.", 80),
            epilog=_ENV_HELP + "\nexample:\n  swarmrl train examples.reasoning_gym.env:"
                   "ReasoningGym --model smollm2 --minutes 30 --train-option lr=1e-5\n")
    else:
        p = argparse.ArgumentParser(
            prog="swarmrl eval", formatter_class=argparse.RawDescriptionHelpFormatter,
            description=textwrap.fill(
                "Evaluate a model on a split of an environment, pinned to one policy version "
                "(every episode aborted: never trained). Writes rollouts.jsonl and a run card "
                "into a new --out.", 80),
            epilog=_ENV_HELP + "\nexample:\n  swarmrl eval examples.textworld.env:TextWorld "
                   "--model smollm2 --split val\n")
    _common(p)
    if command == "train":
        p.add_argument("--from-card", type=Path, metavar="CARD",
                       help="repeat the run a card.json records (with a new --out)")
        train = p.add_argument_group("training")
        train.add_argument("--train-option", action="append", default=[], metavar="KEY=VALUE",
                           help="a trainer option of the started server (repeatable; "
                                "`swarmrl serve --train-option help` lists them)")
        budget = train.add_mutually_exclusive_group(required=True)
        budget.add_argument("--minutes", type=float,
                            help="train this long (wall clock, from the run's first start)")
        budget.add_argument("--groups", type=int, metavar="N",
                            help="train on this many groups")
        train.add_argument("--group-size", type=int, default=8, metavar="N",
                           help="rollouts per item, a GRPO group: the started server's "
                                "group_size; an attached server's must equal it "
                                "(default: %(default)s)")
        train.add_argument("--temperature", type=float, default=1.0,
                           help="training sampling temperature; evaluation is greedy "
                                "(default: %(default)s)")
        train.add_argument("--top-p", type=float,
                           help="training nucleus sampling mass (a server refuses it below 1 "
                                "for a trainable model)")
        train.add_argument("--seed", type=int, default=0,
                           help="order of a finite train split (default: %(default)s)")
        evals = p.add_argument_group("evaluation (val, pinned; test once)")
        evals.add_argument("--val", action=argparse.BooleanOptionalAction, default=True,
                           help="evaluate val before, after and every --eval-every versions, "
                                "checkpointing each evaluated version; kept: the best by val "
                                "and the latest (default: on)")
        evals.add_argument("--eval-every", type=int, default=0, metavar="N",
                           help="also evaluate val every N policy versions (default: 0, only "
                                "before and after)")
        evals.add_argument("--eval-limit", type=int, metavar="N",
                           help="evaluate only the first N val items")
        evals.add_argument("--test", action=argparse.BooleanOptionalAction, default=True,
                           help="at the end, serve the best checkpoint by val and evaluate "
                                "test on it, once per run (default: on; --no-test while "
                                "choosing settings)")
    else:
        evals = p.add_argument_group("evaluation")
        evals.add_argument("--split", choices=("val", "test"), default="val",
                           help="the split to evaluate (default: %(default)s)")
        evals.add_argument("--k", type=int, default=1,
                           help="rollouts per item; k > 1 samples at --temperature and "
                                "reports pass@k (default: %(default)s)")
        evals.add_argument("--temperature", type=float, default=1.0,
                           help="sampling temperature when --k > 1; k = 1 is greedy "
                                "(default: %(default)s)")
        evals.add_argument("--limit", type=int, metavar="N",
                           help="evaluate only the first N items")
        evals.add_argument("--checkpoint", type=Path, metavar="CHECKPOINT",
                           help="evaluate this checkpoint (a step-N folder a training server "
                                "wrote, as SaveCheckpoint and train cards name it), served "
                                "again as a pinned version: restored on the --target server "
                                "(its step, or a path on its machine), or served by the "
                                "started server from its start (a path)")
        evals.add_argument("--role-checkpoint", action="append", default=[],
                           metavar="MODEL=PATH",
                           help="restore this checkpoint of MODEL on the --target server "
                                "before evaluating, under the evaluation's hold (repeatable: "
                                "every trained role's checkpoint, as a train card's "
                                "evals[].checkpoints names them)")
    return p


def train_options(args: argparse.Namespace) -> dict[str, str]:
    """The started server's train options: the given ones, with group_size from
    --group-size (every model's: each trained role's model groups by it), and lora_rank
    16 with --role-base unless given. The checkpoints evaluations save are kept outside the trainer's
    keep_checkpoints; the run deletes those it no longer needs (`_flow.prune_checkpoints`)."""
    options = {"group_size": str(args.group_size)}
    if getattr(args, "role_base", None) and not any(
            p.startswith("lora_rank=") for p in args.train_option):
        options["lora_rank"] = "16"  # each role an adapter of one base
    for pair in args.train_option:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--train-option {pair!r}: expected KEY=VALUE")
        options[key] = value
    if options["group_size"] != str(args.group_size):
        raise SystemExit(f"--train-option group_size={options['group_size']} differs from "
                         f"--group-size {args.group_size}: groups would never fill")
    return options


def role_models(args: argparse.Namespace) -> list[str] | None:
    """The ``--model`` values of a server started with ``--role-base``: each model the
    roles name, as ``NAME=BASE`` (one base; with a lora_rank, each an adapter of it).
    None without ``--role-base``. ValueError for a bad ``--role``."""
    from swarmrl.envs._roles import parse_roles

    roles = parse_roles(args.role)
    if not args.role_base:
        return None
    if not roles:
        raise UsageError("--role-base needs --role NAME=MODEL for each role")
    models = list(dict.fromkeys(spec.model for spec in roles.values()))
    return [f"{m}={args.role_base}" for m in models]


def from_card(command: str, argv: Sequence[str]) -> list[str]:
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
    return [*old, *_pinned_train_options(card, parser(command).parse_args(old)),
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
