"""The runner: plays an environment's GRPO groups for training, and its splits for evaluation.

Rules it keeps (each tested):

- **Bounded.** At most ``concurrency`` rollouts play at once; the clients rollouts make
  share one HTTP connection pool of that size.
- **A failed rollout is never trained.** A rollout that raises or runs past
  ``rollout_timeout_s`` has its episode aborted (its calls stay in the store for
  inspection). It is retried ``retries`` times, each time as a *fresh* episode, so no
  call of a failed attempt can reach a trained episode.
- **A group is trained whole or not at all.** A group's episodes stay open until every
  rollout of the group is done; then all are ended with their rewards, or, if one
  failed for good, all are aborted (a GRPO baseline from part of a group is biased,
  and the trainer would wait for the missing episode for ever).
- **Held-out items are never trained.** Before training, the runner takes the content
  digests (`Item.digest`) of every val and test item; a train item with one of those
  digests is skipped and counted. val and test sharing an item is an error.
- **Evaluation is never trained.** Every evaluation episode is aborted once played,
  and its record names the policy versions that played it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import structlog

from swarmrl._client import AsyncSwarmClient
from swarmrl._episode import AsyncEpisode
from swarmrl._errors import FailedPreconditionError, SwarmError
from swarmrl._sampling import SamplingParams
from swarmrl.envs._api import Environment, HttpPools, Item, Outcome, Rollout, Split
from swarmrl.envs._failures import PolicyError, RunStopped
from swarmrl.envs._progress import Progress
from swarmrl.envs._report import EvalReport, RolloutRecord

__all__ = ["PolicyError", "RunStopped", "Runner", "RunnerConfig", "TrainReport"]

_log = structlog.get_logger("swarmrl.envs")

CLEANUP_S = 10.0
"""The longest a clean-up call (an episode's abort, a hold's release) may take. Without a
bound, a run stopping because its server died waits out the SDK's retry budget (two
minutes) on each one. What is not sent in time is left to the server: an open episode
is aborted when its session's lease lapses, and a hold lives in memory only, so a
restart drops it (a live server answers a release in milliseconds)."""


async def _cleanup(call: Coroutine[Any, Any, object]) -> None:
    """Runs a clean-up call to its end, or `CLEANUP_S`, even when the caller is cancelled
    meanwhile (a call half-sent would leave an episode open, or training held, until its
    lease ended); its errors are dropped, since the caller is already failing or stopping."""
    with contextlib.suppress(Exception):
        await asyncio.shield(asyncio.wait_for(call, CLEANUP_S))


@dataclass(frozen=True)
class RunnerConfig:
    """How the runner plays."""

    group_size: int = 8
    """Rollouts per item in training (a GRPO group); must equal the trainer's group_size."""
    concurrency: int = 16
    """Rollouts playing at once (and the size of the shared connection pool)."""
    rollout_timeout_s: float = 600.0
    """A rollout running longer fails (aborted; retried as a fresh episode)."""
    retries: int = 1
    """Fresh attempts after a failed rollout (0: none)."""
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=1.0))
    """Sampling for training rollouts."""
    eval_sampling: SamplingParams = field(
        default_factory=lambda: SamplingParams(temperature=0.0))
    """Sampling for evaluation with k = 1 (greedy); with k > 1, `sampling` is used."""
    model: str = ""
    """The model rollouts call; empty: the server's first model."""
    seed: int = 0
    """Order of a finite train split (reshuffled each pass with this seed)."""
    agent_version: str = ""
    """Stored with every episode (metrics can be split by it)."""
    progress: bool = True
    """Show a progress bar (a plain line every 30 s when stderr is not a terminal)."""

    def __post_init__(self) -> None:
        for name in ("group_size", "concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.retries < 0 or self.rollout_timeout_s <= 0:
            raise ValueError("retries must be >= 0 and rollout_timeout_s > 0")


@dataclass
class TrainReport:
    """What `Runner.train` played."""

    groups: int = 0
    """Groups ended (queued for training)."""
    groups_aborted: int = 0
    """Groups aborted because a rollout failed for good."""
    rollouts: int = 0
    failed_attempts: int = 0
    """Attempts that failed (each aborted; retried or not)."""
    skipped_held_out: int = 0
    """Train items skipped because their content is a val or test item's."""
    rollouts_lost: int = 0
    """Rollouts of a group that could not be ended whole that were ended (trained) anyway:
    the server aborted one of their siblings first (a lapsed lease)."""
    seconds: float = 0.0
    rewards: list[float] = field(default_factory=list)

    def add(self, other: TrainReport) -> None:
        """Adds another stretch of training (a run trains in stretches between evaluations)."""
        for name in ("groups", "groups_aborted", "rollouts", "failed_attempts", "rollouts_lost",
                     "seconds"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.skipped_held_out = other.skipped_held_out  # the runner's running count
        self.rewards += other.rewards

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        rewards = out.pop("rewards")
        out["mean_reward"] = sum(rewards) / len(rewards) if rewards else None
        return out


class Runner:
    """Plays an `Environment` against a swarm server. Use it as an async context manager:

    .. code-block:: python

        async with swarmrl.AsyncSwarmClient(target) as client:
            async with Runner(env, client, RunnerConfig(group_size=8)) as runner:
                before = await runner.evaluate("val")
                await runner.train(seconds=1800)
                after = await runner.evaluate("val")
    """

    def __init__(self, env: Environment, client: AsyncSwarmClient,
                 config: RunnerConfig | None = None, *,
                 on_record: Callable[[RolloutRecord], None] | None = None) -> None:
        self.env = env
        self.client = client
        self.config = config or RunnerConfig()
        self._on_record = on_record
        self._slots = asyncio.Semaphore(self.config.concurrency)
        self._pools = HttpPools(self.config.concurrency, self.config.rollout_timeout_s)
        self._held_out: dict[str, str] | None = None
        """Content digest -> split, of every val and test item."""
        self._held_out_items: dict[str, list[Item]] = {}
        self._pin: int | None = None
        """The policy version a `pinned()` block holds, inside one."""
        self.skipped_held_out = 0

    async def __aenter__(self) -> Runner:
        await self.env.setup()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.env.close()
        finally:
            await self._pools.aclose()

    # -- splits -------------------------------------------------------------------------

    def held_out(self, split: Split) -> list[Item]:
        """The val or test items (read once), after checking val and test share none."""
        if self._held_out is None:
            digests: dict[str, str] = {}
            names: tuple[Split, ...] = ("val", "test")
            for name in names:
                items = list(self.env.items(name))
                self._held_out_items[name] = items
                for item in items:
                    other = digests.setdefault(item.digest, name)
                    if other != name:
                        raise ValueError(
                            f"{self.env.label}: item {item.id!r} of {name} has the content of "
                            f"a {other} item; val and test must not share items")
            self._held_out = digests
        return self._held_out_items[split]

    def train_items(self) -> Iterator[Item]:
        """Train items, never one whose content is a val or test item's (counted in
        `skipped_held_out`). A finite split is cycled, reshuffled each pass."""
        self.held_out("val")
        assert self._held_out is not None
        source: Iterable[Item] = self.env.items("train")
        rng = random.Random(self.config.seed)
        passes = itertools.count() if isinstance(source, Sequence) else iter([0])
        for _ in passes:
            order: Iterable[Item] = source
            if isinstance(source, Sequence):
                shuffled = list(source)
                rng.shuffle(shuffled)
                order = shuffled
            yielded = False
            for item in order:
                if item.digest in self._held_out:
                    self.skipped_held_out += 1
                    continue
                yielded = True
                yield item
            if not yielded:
                raise ValueError(f"{self.env.label}: the train split has no item that is not "
                                 "also a val or test item")

    # -- one rollout ----------------------------------------------------------------------

    async def _attempts(self, item: Item, split: Split, group_id: str,
                        sampling: SamplingParams) -> tuple[AsyncEpisode | None, RolloutRecord]:
        """Plays `item` until an attempt succeeds or the retries are spent. Returns the
        successful attempt's still-open episode (None after failing for good) and its
        record; every failed attempt's episode is aborted here."""
        record: RolloutRecord | None = None
        for attempt in range(self.config.retries + 1):
            async with self._slots:
                episode, record = await self._attempt(item, split, group_id, sampling, attempt)
            if episode is not None:
                return episode, record
            if self._on_record is not None and attempt < self.config.retries:
                self._on_record(record)
        assert record is not None
        return None, record

    async def _attempt(self, item: Item, split: Split, group_id: str,
                       sampling: SamplingParams,
                       attempt: int) -> tuple[AsyncEpisode | None, RolloutRecord]:
        t0 = time.monotonic()
        episode = await self.client.start_episode(
            item.task, group_id=group_id, agent_version=self.config.agent_version,
            models=[self.config.model] if self.config.model else (),
            labels={"split": split, "item": item.id, "env": self.env.label})
        model = self.config.model or (episode.models[0].name if episode.models else "")
        rollout = Rollout(item, split, episode, model=model, sampling=sampling,
                          pools=self._pools, attempt=attempt)
        try:
            outcome = await asyncio.wait_for(self.env.play(rollout),
                                             self.config.rollout_timeout_s)
            if not isinstance(outcome, Outcome) or not math.isfinite(outcome.reward):
                raise TypeError(f"play() must return an Outcome with a finite reward, "
                                f"got {outcome!r}")
        except asyncio.CancelledError:
            await _abort(episode, "the run was stopped")
            raise
        except Exception as exc:  # a failed rollout is data: aborted, recorded, maybe retried
            error = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
            _log.warning("rollout_failed", env=self.env.label, item=item.id, attempt=attempt,
                         error=error[:500])
            await _abort(episode, f"rollout failed: {error[:400]}")
            return None, RolloutRecord(
                split, item.id, item.task, episode.id, group_id, attempt, None, None, {}, {},
                error, time.monotonic() - t0)
        return episode, RolloutRecord(
            split, item.id, item.task, episode.id, group_id, attempt, float(outcome.reward),
            outcome.success, dict(outcome.metrics), dict(outcome.info), "",
            time.monotonic() - t0)

    # -- training -------------------------------------------------------------------------

    async def _group(self, item: Item, report: TrainReport) -> list[RolloutRecord]:
        group_id = uuid.uuid4().hex
        played = await asyncio.gather(*(
            self._attempts(item, "train", group_id, self.config.sampling)
            for _ in range(self.config.group_size)))
        report.failed_attempts += sum(r.attempt for _, r in played) + sum(
            1 for e, _ in played if e is None)
        whole = all(e is not None for e, _ in played)
        records = []
        for episode, record in played:
            if episode is not None and whole:
                assert record.reward is not None
                try:
                    await episode.end(record.reward)
                except SwarmError as err:
                    # The server ended it first (a lapsed session lease aborts the session's
                    # open episodes): a loss to count, not a reason to stop the run.
                    whole = False
                    record = _replace(record, error=f"could not end: {err}")
                else:
                    record = _replace(record, trained=True)
            elif episode is not None:
                await _abort(episode, "another rollout of its group failed")
                record = _replace(record, error="group aborted: another rollout failed")
            records.append(record)
            if self._on_record is not None:
                self._on_record(record)
        if whole:
            report.groups += 1
            report.rewards += [r.reward for r in records if r.reward is not None]
        else:
            report.groups_aborted += 1
            report.rollouts_lost += sum(r.trained for r in records)
        report.rollouts += len(records)
        return records

    async def train(self, *, groups: int | None = None, seconds: float | None = None,
                    until_version: int | None = None) -> TrainReport:
        """Plays training groups until `groups` groups are done, `seconds` have passed or
        the served policy version reaches `until_version` (groups in flight then finish);
        `groups` or `seconds` must be given."""
        if groups is None and seconds is None:
            raise ValueError("train() needs groups or seconds")
        report, t0 = TrainReport(), time.monotonic()
        deadline = t0 + seconds if seconds is not None else math.inf
        items = self.train_items()
        in_flight: set[asyncio.Task[list[RolloutRecord]]] = set()
        width = max(1, math.ceil(self.config.concurrency / self.config.group_size)) + 1
        started, exhausted, reached = 0, False, False
        progress = Progress(self, f"{self.env.label} train", enabled=self.config.progress,
                            total=groups, seconds=seconds)
        try:
            with progress:
                while True:
                    if until_version is not None and not reached:
                        reached = await self.policy_version() >= until_version
                    while (len(in_flight) < width and time.monotonic() < deadline
                           and (groups is None or started < groups) and not exhausted
                           and not reached):
                        item = next(items, None)  # a finite generator may run out
                        if item is None:
                            exhausted = True
                            break
                        in_flight.add(asyncio.create_task(self._group(item, report)))
                        started += 1
                    if not in_flight:
                        break
                    done, in_flight = await asyncio.wait(
                        in_flight, timeout=max(0.0, min(deadline - time.monotonic(), 2.0)),
                        return_when=asyncio.FIRST_COMPLETED)
                    for task in done:
                        progress.add(task.result())
                    await progress.refresh()
        finally:
            for task in in_flight:
                task.cancel()
            await asyncio.gather(*in_flight, return_exceptions=True)
            report.skipped_held_out = self.skipped_held_out
            report.seconds = time.monotonic() - t0
        return report

    # -- evaluation -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def pinned(self, reason: str = "") -> AsyncIterator[int]:
        """Holds the model's training for the block (`hold_training`: a step in progress
        lands first, none starts until the block ends) and yields the policy version
        served meanwhile. Evaluations inside play that version, and a checkpoint saved
        inside holds its weights. A model nothing trains is pinned by construction.
        Holding needs an admin key on a server with keys."""
        if self._pin is not None:  # nested: the outer hold covers it
            yield self._pin
            return
        holder = f"swarmrl-runner-{uuid.uuid4().hex[:8]}"
        try:
            held = await self.client.hold_training(
                self.config.model or None, holder=holder, reason=reason or "pinned evaluation")
        except FailedPreconditionError:  # not trained here: its version never changes
            self._pin = await self.policy_version()
            try:
                yield self._pin
            finally:
                self._pin = None
            return
        self._pin = held.policy_version
        try:
            yield held.policy_version
        finally:
            self._pin = None
            await _cleanup(self.client.release_training(held.model, holder=holder))

    async def restore(self, checkpoint: str) -> int:
        """Serves a checkpoint the server wrote as a new policy version (`restore_checkpoint`)
        and returns it; inside `pinned()`, the block's evaluations then play it."""
        state = await self.client.restore_checkpoint(checkpoint, self.config.model or None)
        if self._pin is not None:
            self._pin = state.policy_version
        return state.policy_version

    async def evaluate(self, split: Split = "val", *, k: int = 1, limit: int | None = None,
                       pin: bool = True) -> EvalReport:
        """Plays every item of `split` (val or test; the first `limit` items) `k` times,
        aborts every episode (never trained) and reports success or mean reward.

        With `pin` (inside `pinned()` or holding on its own), every call plays one
        policy version, which the report names; an evaluation that saw another version
        raises."""
        if split not in ("val", "test"):
            raise ValueError(f"evaluate() plays val or test, not {split!r}")
        if not pin:
            return await self._evaluate(split, k, limit, None)
        async with self.pinned(f"evaluating {self.env.label} {split}") as version:
            report = await self._evaluate(split, k, limit, version)
        stray = set(report.policy_versions) - {version}
        if stray:
            raise RuntimeError(f"{self.env.label} {split}: evaluation pinned to version "
                               f"{version} played versions {sorted(stray)}")
        return report

    async def _evaluate(self, split: Split, k: int, limit: int | None,
                        pinned: int | None) -> EvalReport:
        items = self.held_out(split)[:limit]
        sampling = self.config.eval_sampling if k == 1 else self.config.sampling
        t0 = time.monotonic()
        progress = Progress(self, f"{self.env.label} eval {split}",
                            enabled=self.config.progress, total=len(items) * k)

        async def one(item: Item) -> RolloutRecord:
            episode, record = await self._attempts(item, split, "", sampling)
            if episode is not None:
                await _abort(episode, f"evaluation ({split}): never trained")
                info = await self.client.get_episode(episode.id, include_calls=True)
                versions = sorted({v for c in info.calls for v, _, _ in c.version_spans}
                                  | {c.policy_version for c in info.calls})
                record = _replace(record, policy_versions=tuple(versions))
            if self._on_record is not None:
                self._on_record(record)
            progress.add([record])
            return record

        with progress:
            records = list(await asyncio.gather(*(one(i) for i in items for _ in range(k))))
        return EvalReport(self.env.label, split, k, records, time.monotonic() - t0, pinned)

    async def policy_version(self) -> int:
        """The served version of the rollouts' model (-1 when unknown)."""
        models = await self.client.list_models()
        for m in models:
            if m.name == self.config.model or not self.config.model:
                return m.policy_version
        return -1


async def _abort(episode: AsyncEpisode, reason: str) -> None:
    """Aborts `episode` (a `_cleanup` call)."""
    await _cleanup(episode.abort(reason))


def _replace(record: RolloutRecord, **changes: Any) -> RolloutRecord:
    import dataclasses

    return dataclasses.replace(record, **changes)
