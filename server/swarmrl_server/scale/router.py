"""`Router`: one `Engine` in front of N replicas of a model, so the server is unchanged.

Invariants:

- Sticky: a call whose `params.affinity_key` (the episode id) was seen before goes to
  the replica that served that key, which holds the episode's prefix in its cache, as
  long as that replica is up. New keys go to the up replica with the fewest calls in
  flight (ties: fewest keys held, then lowest index).
- A replica fails (`ReplicaDied` from its handle, e.g. a Ray actor died): the call in
  flight fails with UNAVAILABLE + a retry hint (the SDK retries it, with its request
  id, and the retry lands on another replica); the replica is marked down, its keys are
  forgotten (their next calls move), and `deaths` counts it. A health loop pings down
  replicas; one that answers again (Ray restarted it) gets the latest weights *before*
  it is marked up, and `restarts` counts it.
- Weights: `update_weights` pushes to every up replica and returns only when all of them
  have the new weights; only then does `policy_version` change. A replica that is down
  meanwhile is brought to the same version before it serves again, so every replica
  that serves a call serves the router's version (or the one being pushed). An
  interrupting push (`interrupt=True`) interrupts the calls in flight on every replica
  (each resumes on its replica, under the new version); a readmitted replica has none.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import structlog
import torch

from swarmrl_server.engine.base import Engine, GenerationChunk, GenerationOutput, SamplingParams
from swarmrl_server.errors import Reason, unavailable

log = structlog.get_logger("swarmrl.router")

MAX_KEYS = 100_000
"""Affinity keys remembered (least recently used forgotten first)."""


class ReplicaDied(Exception):
    """A replica's process is gone (its handle raises this instead of its own errors)."""


Ping = Callable[[Engine], Awaitable[Any]]
"""Answers when the replica is up; raises (ReplicaDied or anything) when it is not."""


async def _ping(engine: Engine) -> Any:
    ping = getattr(engine, "ping", None)
    return await ping() if ping is not None else None


class Router(Engine):
    """Routes a model's calls over its replicas (see the module docstring)."""

    def __init__(
        self, name: str, replicas: Sequence[Engine], *, tokenizer: Any = None,
        ping: Ping = _ping, health_interval_s: float = 0.5, ping_timeout_s: float = 30.0,
    ) -> None:
        if not replicas:
            raise ValueError("a router needs at least one replica")
        first = replicas[0]
        self.name = name
        self.replicas = list(replicas)
        self._serve_like(first)
        self.tokenizer = tokenizer if tokenizer is not None else getattr(first, "tokenizer", None)
        self._ping = ping
        self._health_interval_s = health_interval_s
        self._ping_timeout_s = ping_timeout_s
        self._up = [True] * len(replicas)
        self._inflight = [0] * len(replicas)
        self._keys: OrderedDict[str, int] = OrderedDict()
        self._version = first.policy_version
        self._latest: tuple[Mapping[str, torch.Tensor], int] | None = None
        self._weights_lock = asyncio.Lock()
        self._health: asyncio.Task[None] | None = None
        self.deaths = 0
        """Replica failures seen (each marks the replica down until it answers again)."""
        self.restarts = 0
        """Replicas that came back (restarted) and were readmitted with the latest weights."""
        self.served: list[int] = [0] * len(replicas)
        """Calls each replica finished."""

    # -- Engine ------------------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self._version

    async def start(self) -> None:
        await asyncio.gather(*(r.start() for r in self.replicas))
        if self._health is None:
            self._health = asyncio.create_task(self._health_loop(), name=f"router-{self.name}")

    async def stop(self) -> None:
        if self._health is not None:
            self._health.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health
            self._health = None
        await asyncio.gather(*(r.stop() for r in self.replicas), return_exceptions=True)

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncIterator[GenerationChunk | GenerationOutput]:
        i = self.pick(params.affinity_key)
        self._inflight[i] += 1
        try:
            async for item in self.replicas[i].generate(prompt_ids, params):
                yield item
            self.served[i] += 1
        except ReplicaDied as exc:
            self._mark_down(i, exc)
            raise unavailable(
                Reason.REPLICA_UNAVAILABLE,
                f"replica {i} of model {self.name!r} failed during the call; retry "
                "(the episode continues on another replica)", retry_after_s=0.2,
            ) from exc
        finally:
            self._inflight[i] -= 1

    async def update_weights(
        self, state_dict: Mapping[str, torch.Tensor], policy_version: int, *,
        interrupt: bool = False,
    ) -> None:
        """Every up replica has the weights before the router's version changes."""
        async with self._weights_lock:
            targets = [i for i, up in enumerate(self._up) if up]
            results = await asyncio.gather(
                *(self.replicas[i].update_weights(state_dict, policy_version, interrupt=interrupt)
                  for i in targets),
                return_exceptions=True)
            for i, result in zip(targets, results):
                if isinstance(result, ReplicaDied):
                    self._mark_down(i, result)
                elif isinstance(result, BaseException):
                    raise result
            self._latest = (state_dict, policy_version)
            self._version = policy_version

    # -- routing -----------------------------------------------------------------------

    def pick(self, key: str = "") -> int:
        """The replica for a call with affinity `key` (records a new key's choice)."""
        if key:
            i = self._keys.get(key)
            if i is not None and self._up[i]:
                self._keys.move_to_end(key)
                return i
        up = [i for i, ok in enumerate(self._up) if ok]
        if not up:
            raise unavailable(Reason.REPLICA_UNAVAILABLE,
                              f"no replica of model {self.name!r} is up (restarting)",
                              retry_after_s=1.0)
        held = self.keys_per_replica()
        i = min(up, key=lambda j: (self._inflight[j], held[j], j))
        if key:
            self._keys[key] = i
            self._keys.move_to_end(key)
            while len(self._keys) > MAX_KEYS:
                self._keys.popitem(last=False)
        return i

    def replica_of(self, key: str) -> int | None:
        return self._keys.get(key)

    def keys_per_replica(self) -> list[int]:
        held = [0] * len(self.replicas)
        for i in self._keys.values():
            held[i] += 1
        return held

    @property
    def up(self) -> list[bool]:
        return list(self._up)

    def _mark_down(self, i: int, exc: BaseException) -> None:
        if not self._up[i]:
            return
        self._up[i] = False
        self.deaths += 1
        for key in [k for k, j in self._keys.items() if j == i]:
            del self._keys[key]
        log.warning("replica_down", model=self.name, replica=i, error=str(exc)[:200],
                    deaths=self.deaths)

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self._health_interval_s)
            for i, up in enumerate(self._up):
                if not up:
                    await self._try_readmit(i)

    async def _try_readmit(self, i: int) -> None:
        replica = self.replicas[i]
        try:
            await asyncio.wait_for(self._ping(replica), self._ping_timeout_s)
            async with self._weights_lock:
                if self._latest is not None:
                    await replica.update_weights(*self._latest)
                self._up[i] = True
        except Exception as exc:  # still down (restarting): try again next round
            log.debug("replica_still_down", model=self.name, replica=i, error=str(exc)[:200])
            return
        self.restarts += 1
        log.info("replica_up", model=self.name, replica=i, policy_version=self._version,
                 restarts=self.restarts)
