"""Who is calling: the principal that owns sessions and episodes.

A session belongs to the principal that opened it and an episode to its session's
owner; only that principal (or an admin) may act on them, and everybody else is
told NOT_FOUND so that ids are no oracle. This module has no gRPC or HTTP in it:
the front doors resolve a caller to a `Principal` and hand it to the domain.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarmrl_server.errors import Reason, not_found


@dataclass(frozen=True)
class Principal:
    name: str
    """The owner recorded on sessions and episodes: the principal bound to the caller's
    API key, or a digest of the key itself. "" on a server with no keys (one shared owner)."""
    admin: bool = False
    """Admins may act on everything (operators, the trainer, in-process callers)."""

    def may_act_on(self, owner: str) -> bool:
        return self.admin or self.name == owner


ANONYMOUS = Principal("")
"""Every caller of a server without API keys: they all share one owner."""

IN_PROCESS = Principal("", admin=True)
"""Trusted in-process callers: the HTTP shim once the per-episode key resolved the
episode, the trainer, tests that drive a Swarm directly. Always passed explicitly,
never a default: a domain entry point without a caller is a type error."""


def require_owner(caller: Principal, owner: str, reason: Reason, what: str, ident: str) -> None:
    """NOT_FOUND (exactly what an unknown id gets) unless `caller` may act on `owner`'s thing."""
    if not caller.may_act_on(owner):
        raise not_found(reason, what, ident)


