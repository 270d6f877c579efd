"""Who holds generation paused, per model.

A pause is a named *holder* (the admin, the trainer of a model, ...) holding one model,
or every model at once, with a reason. Generation of model M is refused (the client
retries later) while any holder holds M or every model; so one model's trainer falling
behind pauses that model only. Each holder lifts only its own pause: a trainer that
catches up never lifts the admin's, and the admin's resume never lifts a trainer's.

Clients see the change in the event log: "pausing" when a model that was generating
stops, "resumed" when a model that was paused generates again (with the reason the
lifted holder gave). A holder joining models that are already paused adds no event.

A call that arrives while its model is paused can wait for the pause to lift
(`wait_generating`): every release notifies the waiters, which re-check their own
model, so a wait ends the moment the last holder lets go, with no polling.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from swarmrl_server.events import EventLog

ADMIN = "admin"
"""The admin's PauseGeneration / ResumeGeneration (every model)."""
TRAINER = "trainer"
"""A model's trainer: back-pressure (max_pending) and sync mode's step."""

ALL_MODELS = ""
"""The model key of a pause that holds every model."""


class Pauses:
    """The pause holders of one server's models."""

    def __init__(self, models: Collection[str], events: EventLog) -> None:
        self._models = tuple(models)
        self._events = events
        self._held: dict[tuple[str, str], str] = {}
        """(holder, model or ALL_MODELS) -> reason, oldest first."""
        self._released = asyncio.Condition()
        """Notified on every release: waiters re-check whether their model generates."""
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Calls waiting now for a pause of their model to lift."""
        return self._waiting

    def reason(self, model: str) -> str | None:
        """Why generation of `model` is paused (the oldest holder's reason), or None."""
        for (_, held), reason in self._held.items():
            if held in (model, ALL_MODELS):
                return reason
        return None

    def any_reason(self) -> str | None:
        """The oldest reason any model is paused for, or None when every model generates."""
        return next(iter(self._held.values()), None)

    def _paused(self) -> set[str]:
        return {m for m in self._models if self.reason(m) is not None}

    async def hold(self, holder: str, reason: str, model: str = ALL_MODELS) -> None:
        """`holder` pauses `model` (every model by default); holding again keeps the
        first reason."""
        if (holder, model) in self._held:
            return
        before = self._paused()
        self._held[(holder, model)] = reason
        if self._paused() - before:
            await self._events.append("pausing", reason=reason)

    async def release(self, holder: str, model: str = ALL_MODELS) -> None:
        """Lifts `holder`'s pause of `model` (a no-op when it holds none)."""
        if (holder, model) not in self._held:
            return
        before = self._paused()
        reason = self._held.pop((holder, model))
        async with self._released:
            self._released.notify_all()
        if before - self._paused():
            await self._events.append("resumed", reason=reason)

    async def wait_generating(self, model: str, timeout_s: float) -> str | None:
        """Waits until generation of `model` is not paused, for at most `timeout_s`
        seconds; returns None once it generates, or the reason it is still paused when
        the time is up. Cancelling the caller (its client went away) ends the wait and
        leaves nothing behind."""
        if self.reason(model) is None or timeout_s <= 0:
            return self.reason(model)
        self._waiting += 1
        try:
            async with self._released:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout_s):
                        await self._released.wait_for(lambda: self.reason(model) is None)
        finally:
            self._waiting -= 1
        return self.reason(model)

    def holder(self, holder: str, model: str) -> ModelPause:
        """`holder`'s handle on `model` (what a trainer is given)."""
        return ModelPause(self, holder, model)


class ModelPause:
    """One holder's pause of one model (`trainer.port.PauseHolder`)."""

    def __init__(self, pauses: Pauses, holder: str, model: str) -> None:
        self._pauses = pauses
        self._holder = holder
        self._model = model

    async def hold(self, reason: str) -> None:
        await self._pauses.hold(self._holder, reason, self._model)

    async def release(self) -> None:
        await self._pauses.release(self._holder, self._model)
