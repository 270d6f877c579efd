"""One rollout of an item: its attempts, each a fresh episode, and what each failure means.

Rules it keeps (each tested; the kinds of failure are `swarmrl.envs._failures`'):

- **Every RPC of an attempt is inside its failure handling**: starting the episode, the
  play's model calls, and in evaluation the abort and the read of the episode's calls.
  The SDK retries UNAVAILABLE within each call (its `RetryPolicy`); what still fails
  fails the attempt, never the run.
- **An attempt is aborted when it fails** (its calls stay in the store for inspection),
  also when it is cancelled (the run stopping): the abort outlives the cancellation,
  bounded by `CLEANUP_S`.
- **Infrastructure failures are retried** (the environment's or the server's): up to
  ``retries`` fresh attempts, each a new episode, so no call of a failed attempt can
  reach a trained episode. After a server failure the next attempt waits a backoff
  drawn as the SDK's `RetryPolicy` draws its own (tenacity's full jitter).
- **The policy's failures are the policy's score, never retried** (retrying them until
  they pass would flatter the policy): a `PolicyError` is an outcome (its reward; no
  success); a timeout fails the rollout.
- **One episode per role** (`swarmrl.envs._roles`): an attempt opens every role's
  episode, on its model, under the role's group id; a failed attempt aborts them all; a
  frozen role's is aborted once played (never trained); each trained role's is ended by
  the runner with the role's own reward.
- **Errors that will recur stop the run** (`RunStopped`, `is_fatal`), and so do
  ``max_consecutive_failures`` rollouts in a row that failed for good for the
  environment's or the server's reasons (a rollout with an outcome resets the count; a
  timeout, the policy's doing, leaves it as it is).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from swarmrl._errors import FailedPreconditionError
from swarmrl._retry import RetryPolicy
from swarmrl._sampling import SamplingParams
from swarmrl.envs._api import Environment, HttpPools, Item, Outcome, Rollout, Split
from swarmrl.envs._failures import PolicyError, RunStopped, classify, is_fatal
from swarmrl.envs._report import RolloutRecord
from swarmrl.envs._roles import RoleSpec, group_id_for, resolve

if TYPE_CHECKING:
    from swarmrl._client import AsyncSwarmClient
    from swarmrl._episode import AsyncEpisode
    from swarmrl.envs._runner_config import RunnerConfig

__all__ = ["CLEANUP_S", "Played", "Player", "abort"]

_log = structlog.get_logger("swarmrl.envs")

CLEANUP_S = 10.0
"""The longest a clean-up call (an episode's abort, a hold's release) may take. Without a
bound, a run stopping because its server died waits out the SDK's retry budget (two
minutes) on each one. What is not sent in time is left to the server: an open episode
is aborted when its session's lease lapses, and so does a hold."""


async def cleanup(call: Coroutine[Any, Any, object]) -> None:
    """Runs a clean-up call to its end, or `CLEANUP_S`, even when the caller is cancelled
    meanwhile (a call half-sent would leave an episode open, or training held, until its
    lease ended); its errors are dropped, since the caller is already failing or stopping."""
    with contextlib.suppress(Exception):
        await asyncio.shield(asyncio.wait_for(call, CLEANUP_S))


async def abort(episode: AsyncEpisode, reason: str) -> None:
    """Aborts `episode` (a `cleanup` call)."""
    await cleanup(episode.abort(reason))


@dataclass(frozen=True)
class Played:
    """A rollout played to its end: its last attempt's record, and the successful
    attempt's trained roles' episodes, still open, in training (None in evaluation, or
    after failing)."""

    episodes: dict[str, AsyncEpisode] | None
    record: RolloutRecord

    async def abort(self, reason: str) -> None:
        """Aborts every episode still open (`cleanup` calls)."""
        await asyncio.gather(*(abort(e, reason) for e in (self.episodes or {}).values()))


class _Failed(Exception):
    """An attempt failed: its record (episode aborted) and the error."""

    def __init__(self, record: RolloutRecord, error: BaseException) -> None:
        super().__init__(record.error)
        self.record = record
        self.error = error


class _Retry(_Failed):
    """An attempt failed in a way worth a fresh attempt (the environment's or the server's)."""


class Player:
    """Plays rollouts for a runner: at most ``concurrency`` attempts at once."""

    def __init__(self, env: Environment, client: AsyncSwarmClient, config: RunnerConfig,
                 pools: HttpPools, on_record: Callable[[RolloutRecord], None] | None) -> None:
        self.env = env
        self.client = client
        self.config = config
        self._pools = pools
        self._on_record = on_record
        self._slots = asyncio.Semaphore(config.concurrency)
        self.consecutive_failures = 0
        """Rollouts in a row that failed for good for infrastructure reasons."""

    def emit(self, record: RolloutRecord) -> None:
        if self._on_record is not None:
            self._on_record(record)

    def _wait(self, state: RetryCallState) -> float:
        """The backoff before a fresh attempt: the SDK's jitter after a server failure,
        none after the environment's (the server is fine; nothing to wait out)."""
        err = state.outcome.exception() if state.outcome is not None else None
        if isinstance(err, _Failed) and err.record.kind == "server":
            policy = self.client.config.retry or RetryPolicy()
            jitter = wait_random_exponential(
                multiplier=policy.initial, exp_base=policy.multiplier, max=policy.maximum)
            return float(jitter(state))
        return 0.0

    async def play(self, item: Item, split: Split, group_id: str, sampling: SamplingParams,
                   *, versions_of: Mapping[str, int] | str = "") -> Played:
        """Plays `item` until an attempt has an outcome, the retries are spent, or the
        policy failed. Training (`split` "train") returns the outcome's episode still open;
        evaluation aborts it and records the policy versions of the calls to the models
        `versions_of` names (the pinned ones; every model of the rollout when empty).
        Failed attempts are recorded (`emit`), the last one by the caller, with the
        rollout's failures by kind in ``errors``."""
        errors: Counter[str] = Counter()
        retrying = AsyncRetrying(
            retry=retry_if_exception_type(_Retry), stop=stop_after_attempt(self.config.retries + 1),
            wait=self._wait, reraise=True)
        episodes: dict[str, AsyncEpisode] | None = None
        record: RolloutRecord | None = None
        try:
            async for try_ in retrying:
                with try_:
                    attempt = try_.retry_state.attempt_number - 1
                    try:
                        async with self._slots:
                            episodes, record = await self._attempt(
                                item, split, group_id, sampling, attempt, versions_of)
                    except _Failed as failed:
                        errors[failed.record.kind] += 1
                        failed.record = dataclasses.replace(failed.record, errors=dict(errors))
                        if is_fatal(failed.error):
                            self.emit(failed.record)
                            raise RunStopped(item, split, failed.error) from failed.error
                        if isinstance(failed, _Retry) and attempt < self.config.retries:
                            self.emit(failed.record)
                        raise
        except _Failed as failed:
            return self._failed_for_good(item, split, failed)
        assert record is not None  # tenacity ends its loop after a try that did not raise
        if record.kind:
            errors[record.kind] += 1
        self.consecutive_failures = 0
        return Played(episodes, dataclasses.replace(record, errors=dict(errors)))

    def _failed_for_good(self, item: Item, split: Split, failed: _Failed) -> Played:
        if failed.record.kind in ("environment", "server"):
            self.consecutive_failures += 1
            limit = self.config.max_consecutive_failures
            if limit and self.consecutive_failures >= limit:
                self.emit(failed.record)
                raise RunStopped(item, split, failed.error,
                                 f"{self.consecutive_failures} rollouts in a row failed"
                                 ) from failed.error
        return Played(None, failed.record)

    async def _open(self, item: Item, split: Split, group_id: str, roles: Mapping[str, RoleSpec],
                    opened: dict[str, AsyncEpisode]) -> dict[str, tuple[AsyncEpisode, str]]:
        """Opens every role's episode (into `opened`, so a failure aborts those opened)."""
        bound: dict[str, tuple[AsyncEpisode, str]] = {}
        for role, spec in roles.items():
            labels = {"split": split, "item": item.id, "env": self.env.label}
            if role:
                labels["role"] = role
            episode = await self.client.start_episode(
                item.task, group_id=group_id_for(group_id, role),
                agent_version=self.config.agent_version,
                models=[spec.model] if spec.model else (), labels=labels)
            opened[role] = episode
            bound[role] = (episode, spec.model or (
                episode.models[0].name if episode.models else ""))
        return bound

    async def _attempt(self, item: Item, split: Split, group_id: str, sampling: SamplingParams,
                       attempt: int, versions_of: Mapping[str, int] | str
                       ) -> tuple[dict[str, AsyncEpisode] | None, RolloutRecord]:
        """One attempt, a fresh episode per role; raises `_Failed` / `_Retry` with the
        attempt's record after aborting its episodes."""
        t0 = time.monotonic()
        opened: dict[str, AsyncEpisode] = {}
        record = RolloutRecord(split, item.id, item.task, "", group_id, attempt, None, None, {},
                               {}, "", 0.0)
        playing_since = math.inf
        specs = resolve(self.env.roles, self.config.roles, self.config.model)
        try:
            bound = await self._open(item, split, group_id, specs, opened)
            first = next(iter(bound))
            episode, model = bound[first]
            record = dataclasses.replace(
                record, episode_id=episode.id,
                role_episodes={r: e.id for r, (e, _) in bound.items()} if first else {})
            rollout = Rollout(item, split, episode, model=model, sampling=sampling,
                              pools=self._pools, attempt=attempt, roles=bound)
            playing_since = time.monotonic()
            try:
                outcome = await asyncio.wait_for(self.env.play(rollout),
                                                 self.config.rollout_timeout_s)
            except PolicyError as err:  # the policy's score, kept as an outcome
                outcome = Outcome(reward=err.reward)
                record = dataclasses.replace(record, kind="policy",
                                             error=f"PolicyError: {err}"[:2000])
            rewards = _rewards(outcome, bound)
            assert isinstance(outcome, Outcome)
            record = dataclasses.replace(
                record, reward=rewards[first] if not first else outcome.overall,
                rewards=rewards if first else {}, success=outcome.success,
                metrics=dict(outcome.metrics), info=dict(outcome.info))
            for role in [r for r in bound if split != "train" or specs[r].frozen]:
                # evaluation, or a frozen role: never trained
                why = f"evaluation ({split})" if split != "train" else f"frozen role {role}"
                with contextlib.suppress(FailedPreconditionError):  # closed already (a lapse)
                    await opened.pop(role).abort(f"{why}: never trained")
            if split != "train":  # the versions that played it, per model
                by_model = await self._versions(bound, versions_of)
                record = dataclasses.replace(
                    record, model_versions=by_model,
                    policy_versions=tuple(sorted({v for vs in by_model.values() for v in vs})))
        except asyncio.CancelledError:
            await asyncio.gather(*(abort(e, "the run was stopped") for e in opened.values()))
            raise
        except Exception as exc:  # a failed attempt is data: aborted, recorded, maybe retried
            # wait_for's own timeout (not one from inside play(), an environment
            # server's socket, say, which is the environment's failure)
            timed_out = isinstance(exc, asyncio.TimeoutError | TimeoutError) and (
                time.monotonic() - playing_since >= self.config.rollout_timeout_s)
            kind = classify(exc, timed_out=timed_out)
            error = "timed out" if timed_out else f"{type(exc).__name__}: {exc}"
            _log.warning("rollout_failed", env=self.env.label, item=item.id, attempt=attempt,
                         kind=kind, error=error[:500])
            await asyncio.gather(*(abort(e, f"rollout failed: {error[:400]}")
                                   for e in opened.values()))
            record = dataclasses.replace(record, kind=kind, error=error[:2000], reward=None,
                                         rewards={}, success=None,
                                         seconds=time.monotonic() - t0)
            raise (_Retry if kind in ("environment", "server") else _Failed)(record, exc) from exc
        return (opened if split == "train" else None), dataclasses.replace(
            record, seconds=time.monotonic() - t0)

    async def _versions(self, bound: Mapping[str, tuple[AsyncEpisode, str]],
                        versions_of: Mapping[str, int] | str) -> dict[str, list[int]]:
        """The policy versions of the evaluated calls by model: of the pinned models'
        calls (all the rollout's models when `versions_of` names none), every role's
        episode read."""
        pinned = set(versions_of) if not isinstance(versions_of, str) else (
            {versions_of} if versions_of else set())
        names = pinned or {m for _, m in bound.values()}
        versions: dict[str, set[int]] = {}
        for episode, _ in bound.values():
            info = await self.client.get_episode(episode.id, include_calls=True)
            for c in info.calls:
                if c.model in names:
                    versions.setdefault(c.model, set()).update(
                        {c.policy_version} | {v for v, _, _ in c.version_spans})
        return {m: sorted(vs) for m, vs in sorted(versions.items())}


def _rewards(outcome: object, bound: Mapping[str, Any]) -> dict[str, float]:
    """Each role's reward, checked finite (TypeError otherwise: a bug in ``play()``)."""
    if not isinstance(outcome, Outcome):
        raise TypeError(f"play() must return an Outcome, got {outcome!r}")
    unknown = set(outcome.rewards) - set(bound)
    rewards = {r: outcome.reward_for(r) for r in bound}
    if unknown or not all(math.isfinite(v) for v in rewards.values()):
        raise TypeError(f"play() must return an Outcome with a finite reward for each of "
                        f"its roles {sorted(bound)}, got {outcome!r}")
    return rewards
