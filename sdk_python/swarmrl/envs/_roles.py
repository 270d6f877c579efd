"""Roles to models: which model plays each role of a multi-agent environment, and whether
it is trained.

A rollout of an environment with roles holds **one episode per role**, each on that
role's model, with a group id made per role (``<group>:<role>``). What follows from it,
with no server change (the trainer groups a model's ended episodes by task and group id,
and never plans a group an open episode would join):

- each role's calls land in its own model's episodes and train on that role's reward
  (the episode's reward);
- GRPO groups are per role: one group per item and role, of ``group_size`` episodes;
- self-play (two seats on one model) is two episodes on the same model under distinct
  group ids, so each seat has its own baseline (SPIRAL's role-conditioned advantage):
  one seat's rewards never become the other's baseline;
- a frozen role's episode is always aborted, never trained (a fixed opponent, a judge, a
  simulated user on a model the run does not train, or on a trained model whose seat is
  held fixed);
- a failed rollout aborts every role's episode, and a group is ended whole or aborted
  whole, across roles (`swarmrl.envs._runner`).

The syntax (``--role NAME=MODEL`` on the command line; `parse_role`): ``NAME=MODEL`` a
trained role, ``NAME=MODEL:frozen`` a frozen one. Two roles naming one model is
self-play.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["RoleSpec", "check_roles", "group_id_for", "parse_role", "parse_roles",
           "played_models", "resolve", "trained_models"]


@dataclass(frozen=True)
class RoleSpec:
    """The model a role plays on, and whether its calls are trained."""

    model: str
    """The server's model name ("" : the run's model, or the server's first)."""
    frozen: bool = False
    """Served, never trained: the role's episodes are aborted once played."""


def parse_role(text: str) -> tuple[str, RoleSpec]:
    """``NAME=MODEL`` or ``NAME=MODEL:frozen``; ValueError naming what is wrong."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise ValueError(f"--role {text!r}: expected NAME=MODEL or NAME=MODEL:frozen")
    model, colon, flag = rest.partition(":")
    if colon and flag != "frozen":
        raise ValueError(f"--role {text!r}: the only flag after ':' is 'frozen', got {flag!r}")
    if not model:
        raise ValueError(f"--role {text!r}: no model")
    return name, RoleSpec(model, frozen=bool(colon))


def parse_roles(texts: Iterable[str]) -> dict[str, RoleSpec]:
    """Every ``--role``; a role named twice is refused."""
    roles: dict[str, RoleSpec] = {}
    for text in texts:
        name, spec = parse_role(text)
        if name in roles:
            raise ValueError(f"--role {name!r} given twice")
        roles[name] = spec
    return roles


def check_roles(declared: Sequence[str], roles: Mapping[str, RoleSpec]) -> None:
    """Refuses roles the environment does not declare (a typo would otherwise play the
    role on the default model)."""
    unknown = sorted(set(roles) - set(declared))
    if unknown:
        raise ValueError(f"--role {', '.join(unknown)}: not a role of the environment "
                         f"(its roles: {', '.join(r or '(unnamed)' for r in declared)})")


def resolve(declared: Sequence[str], roles: Mapping[str, RoleSpec],
            default_model: str) -> dict[str, RoleSpec]:
    """Each declared role's spec, the unmapped ones on `default_model`, trained."""
    return {r: roles.get(r, RoleSpec(default_model)) for r in declared}


def trained_models(declared: Sequence[str], roles: Mapping[str, RoleSpec],
                   default_model: str) -> list[str]:
    """The models a run trains (each once, in role order): what it checks the group size
    of and pins for evaluation."""
    seen: list[str] = []
    for spec in resolve(declared, roles, default_model).values():
        if not spec.frozen and spec.model not in seen:
            seen.append(spec.model)
    return seen


def played_models(declared: Sequence[str], roles: Mapping[str, RoleSpec],
                  default_model: str) -> list[str]:
    """Every model a rollout calls, frozen roles' included: an evaluation pins them all."""
    seen: list[str] = []
    for spec in resolve(declared, roles, default_model).values():
        if spec.model not in seen:
            seen.append(spec.model)
    return seen


def group_id_for(group_id: str, role: str) -> str:
    """A role's group id: ``<group>:<role>`` (the unnamed role keeps the group's own;
    evaluation's empty group id stays empty)."""
    return f"{group_id}:{role}" if role and group_id else group_id
