"""Holds of one model's training: leases, never locks (DESIGN, invariant 9).

A hold (AdminService.HoldTraining) keeps new optimizer steps of a model from starting
while its holder evaluates one pinned policy version. A holder that dies must not stop
training for good, so every hold is a lease, and these are all its rules:

- a hold bound to the holder's client session (`session_id`) lasts while that session's
  lease does (the SDK's heartbeat renews it), and lapses when the session is closed or
  its lease runs out;
- a hold without a session lasts `lease_s` (DEFAULT_LEASE_S unless given, within
  MIN_LEASE_S..MAX_LEASE_S), and holding again renews it;
- holding again as the same holder is never a second hold: the first keeps its start
  and reason, and is re-bound to the new call's session (a resumed run, in a new
  session, adopts its hold) or lease;
- a holder lifts only its own hold.

Holds live in memory only: a restarted server holds nothing (its holders' sessions
outlive the restart, their holds do not; a resumed run holds again). Pure logic, with
the clock and the live sessions handed in: the trainer applies it (`Trainer.hold`,
`Trainer.lapse_holds`), tests drive it directly.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from swarmrl_server.errors import Reason, invalid, not_found

MIN_LEASE_S = 1.0
MAX_LEASE_S = 600.0
DEFAULT_LEASE_S = 60.0
"""The lease of a hold without a session (a holder from a stub, curl, an admin script)."""

LapseCause = Literal["session", "lease"]
"""Why a hold lapsed: its session ended (closed, or its lease ran out), or its own lease ran
out without a renewal."""


@dataclass
class Hold:
    """One holder's hold of a model's training."""

    holder: str
    reason: str
    since: float
    """When the holder first took it (seconds since the epoch); holding again keeps it."""
    session_id: str = ""
    """The session it lasts with; "" for a hold on a lease of its own."""
    lease_s: float = 0.0
    """Its own lease, when it has no session (0 when it has one)."""
    expires_at: float = 0.0
    """When its own lease runs out unless renewed (0 when it lasts with a session)."""

    def lapsed(self, now: float, live_sessions: Collection[str]) -> LapseCause | None:
        """Why the hold has lapsed by `now`, or None while it lasts: the one rule."""
        if self.session_id:
            return None if self.session_id in live_sessions else "session"
        return "lease" if now >= self.expires_at else None


def check_binding(session_id: str, lease_s: float | None,
                  live_sessions: Collection[str]) -> float | None:
    """The lease a hold gets (None when bound to a session). Refused: a lease out of range,
    or one given with a session (INVALID_ARGUMENT naming "lease"); a session that is not
    live (NOT_FOUND, SESSION_NOT_FOUND)."""
    if session_id:
        if lease_s is not None:
            raise invalid("lease", "a hold with a session_id lasts as long as the session; "
                                   "give session_id or lease, not both")
        if session_id not in live_sessions:
            raise not_found(Reason.SESSION_NOT_FOUND, "session", session_id)
        return None
    if lease_s is None:
        return DEFAULT_LEASE_S
    if not MIN_LEASE_S <= lease_s <= MAX_LEASE_S:
        raise invalid("lease", f"must be between {MIN_LEASE_S:g} s and {MAX_LEASE_S:g} s, "
                               f"not {lease_s:g} s")
    return lease_s


class Holds:
    """The holds of one model's training, by holder."""

    def __init__(self) -> None:
        self._holds: dict[str, Hold] = {}

    def __bool__(self) -> bool:
        return bool(self._holds)

    def __len__(self) -> int:
        return len(self._holds)

    def take(self, holder: str, reason: str, *, session_id: str = "",
             lease_s: float | None = None, now: float,
             live_sessions: Collection[str]) -> tuple[Hold, bool]:
        """`holder`'s hold, bound to the live session `session_id` or to a lease
        (`check_binding`), and whether it is new. Holding again re-binds the holder's one
        hold."""
        lease = check_binding(session_id, lease_s, live_sessions)
        hold = self._holds.get(holder)
        new = hold is None
        if hold is None:
            hold = self._holds[holder] = Hold(holder, reason, since=now)
        hold.session_id = session_id
        hold.lease_s = lease or 0.0
        hold.expires_at = now + lease if lease is not None else 0.0
        return hold, new

    def release(self, holder: str) -> Hold | None:
        """Lifts `holder`'s hold; None when it holds none."""
        return self._holds.pop(holder, None)

    def live(self, now: float, live_sessions: Collection[str]) -> list[Hold]:
        """The holds that last at `now`, the oldest first (lapsed ones are left out but
        kept: `lapse` drops them)."""
        return sorted((h for h in self._holds.values() if h.lapsed(now, live_sessions) is None),
                      key=lambda h: (h.since, h.holder))

    def lapse(self, now: float, live_sessions: Collection[str]) -> list[tuple[Hold, LapseCause]]:
        """Drops the holds that have lapsed by `now`; returns them with why."""
        lapsed: list[tuple[Hold, LapseCause]] = []
        for holder, hold in list(self._holds.items()):
            cause = hold.lapsed(now, live_sessions)
            if cause is not None:
                del self._holds[holder]
                lapsed.append((hold, cause))
        return lapsed

    def reasons(self) -> dict[str, str]:
        """Holder -> reason, of every hold not yet dropped."""
        return {h: hold.reason for h, hold in self._holds.items()}
