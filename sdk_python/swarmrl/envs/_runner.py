"""The runner: plays an environment's GRPO groups for training, and its splits for evaluation.

Rules it keeps (each tested; one rollout's rules are in `swarmrl.envs._rollout`, the
splits' in `swarmrl.envs._splits`, the kinds of failure in `swarmrl.envs._failures`):

- **Bounded.** At most ``concurrency`` rollouts play at once; the clients rollouts make
  share one HTTP connection pool of that size, and ``asyncio.to_thread`` work (an
  environment's blocking steps, ``items()``) runs on a default executor of
  ``concurrency + 4`` threads, not the interpreter's cpu + 4.
- **The server is remote.** Every RPC of a rollout is inside its failure handling; a
  server that restarts costs the rollouts in flight (retried as fresh episodes), never
  the run. One UNAVAILABLE never ends `train` or `evaluate`.
- **A failed rollout is never trained.** Its episode is aborted (its calls stay in the
  store for inspection); the environment's and the server's failures are retried as
  fresh episodes, so no call of a failed attempt can reach a trained episode. The
  policy's failures are its score: a `PolicyError` is trained with its reward; a
  timeout fails the rollout. Every failure is counted by kind in the reports.
- **A group is trained whole or not at all.** A group's episodes stay open until every
  rollout of the group is done; then all are ended with their rewards, or, if one
  failed for good, all are aborted (a GRPO baseline from part of a group is biased,
  and the trainer would wait for the missing episode for ever). A stopping run aborts
  the open episodes of its groups in flight; none is left open.
- **Errors that will recur stop the run** (`RunStopped`, naming the error and its
  item), in-flight rollouts aborted first: a `TypeError`, `AttributeError` or
  `NameError` from `play()`, a server's INVALID_ARGUMENT, PERMISSION_DENIED,
  UNAUTHENTICATED or NOT_FOUND (of a model), or ``max_consecutive_failures`` rollouts in
  a row that failed for good.
- **Held-out items are never trained**, checked on content (`Item.digest`); val and test
  sharing an item is an error.
- **Evaluation is never trained, and counts every item.** Every evaluation episode is
  aborted once played and its record names the policy versions of the evaluated
  model's calls (a judge's calls to another model are not counted); a rollout that
  failed for good is in the denominator, not solved.
- **A training hold belongs to its holder.** With `RunnerConfig.holder` set, a runner
  releases that holder's earlier hold when it starts (a resumed run never stacks a
  second one) and holds under that id. A pin a server restart lost is never a figure
  (`PinLost`).
- **Groups match the trainer's.** `train` refuses a ``group_size`` other than the one the
  server's trainer groups by (`ModelInfo.group_size`, when the server reports one), for
  every model the run trains.
- **Roles** (`swarmrl.envs._roles`): a rollout holds one episode per role; a group is
  ended whole or aborted whole across roles (each trained role's episodes with their own
  rewards), and an evaluation pins every model its roles play, under the one holder.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import time
import uuid
import weakref
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from swarmrl._client import AsyncSwarmClient
from swarmrl._errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    NotFoundError,
    PermissionDeniedError,
    SwarmError,
    UnavailableError,
)
from swarmrl.envs._api import Environment, HttpPools, Item, Split
from swarmrl.envs._failures import PinLost, PolicyError, RunStopped
from swarmrl.envs._progress import Progress
from swarmrl.envs._report import EvalReport, RolloutRecord, TrainReport
from swarmrl.envs._roles import check_roles
from swarmrl.envs._rollout import CLEANUP_S, Played, Player, cleanup
from swarmrl.envs._runner_config import RunnerConfig
from swarmrl.envs._splits import Splits

__all__ = ["CLEANUP_S", "PolicyError", "RunStopped", "Runner", "RunnerConfig", "TrainReport"]

_log = structlog.get_logger("swarmrl.envs")

_cleanup = cleanup  # the name the runner's tests and older callers use


_EXECUTORS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, ThreadPoolExecutor]]
_EXECUTORS = weakref.WeakKeyDictionary()


def _size_default_executor(workers: int) -> None:
    """Makes the running loop's default executor (what ``asyncio.to_thread`` uses) at least
    `workers` threads; the interpreter's default is cpu + 4, too few for a runner whose
    rollouts each step a game in a thread. A smaller one this module set is shut down
    (its work in progress finishes)."""
    loop = asyncio.get_running_loop()
    current = _EXECUTORS.get(loop)
    if current is not None and current[0] >= workers:
        return
    executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="swarmrl-envs")
    loop.set_default_executor(executor)
    _EXECUTORS[loop] = (workers, executor)
    if current is not None:
        current[1].shutdown(wait=False)


class Runner:
    """Plays an `Environment` against a swarm server. Use it as an async context manager:

    .. code-block:: python

        async with swarmrl.AsyncSwarmClient(target) as client:
            async with Runner(env, client, RunnerConfig(group_size=8)) as runner:
                before = await runner.evaluate("val")
                await runner.train(seconds=1800)
                after = await runner.evaluate("val")

    `train` and `evaluate` raise `RunStopped` on an error that would recur on every
    rollout (see the module docstring).
    """

    def __init__(self, env: Environment, client: AsyncSwarmClient,
                 config: RunnerConfig | None = None, *,
                 on_record: Callable[[RolloutRecord], None] | None = None) -> None:
        self.env = env
        self.client = client
        self.config = config or RunnerConfig()
        self._pools = HttpPools(self.config.concurrency, self.config.rollout_timeout_s)
        self._player = Player(env, client, self.config, self._pools, on_record)
        self._splits = Splits(env, self.config.seed)
        check_roles(env.roles, self.config.roles)
        self._pins: dict[str, int] = {}
        """Each model a `pinned()` block holds, and its version (empty when none)."""
        self._instance = ""
        """The server instance the current `pinned()` block holds on."""
        self._group_size_checked = False

    async def __aenter__(self) -> Runner:
        _size_default_executor(self.config.concurrency + 4)
        await self.env.setup()
        await self._splits.load()
        if self.config.holder:  # a resumed run's hold: released, re-taken when it pins
            with contextlib.suppress(FailedPreconditionError, NotFoundError,
                                     PermissionDeniedError):
                for model in self.config.played_models(self.env):
                    await self.client.release_training(model or None,
                                                       holder=self.config.holder)
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.env.close()
        finally:
            await self._pools.aclose()

    # -- splits -------------------------------------------------------------------------

    def held_out(self, split: Split) -> list[Item]:
        """The val or test items (read once), after checking val and test share none."""
        return self._splits.held_out(split)

    def train_items(self) -> Iterator[Item]:
        """A fresh train stream (see `swarmrl.envs._splits`), stepped on the caller's
        thread; `train` steps its own in a worker thread."""
        return self._splits.train_items()

    @property
    def skipped_held_out(self) -> int:
        """Train items skipped so far because their content is a val or test item's."""
        return self._splits.skipped_held_out

    # -- playing ------------------------------------------------------------------------

    async def _all(self, plays: Iterable[Coroutine[Any, Any, Played]]) -> list[Played]:
        """Plays rollouts together (a task group): when one raises (`RunStopped`) or the
        caller is cancelled, the others are cancelled (each aborts its episode), the open
        episodes of those that finished are aborted, and the first error is raised."""
        tasks = [asyncio.ensure_future(play) for play in plays]
        try:
            if tasks:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            errors = [t.exception() for t in tasks if t.done() and not t.cancelled()]
            if any(errors):
                raise _first([e for e in errors if e is not None])
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            finished = [t.result() for t in tasks
                        if t.done() and not t.cancelled() and t.exception() is None]
            await asyncio.gather(*(p.abort("the run was stopped") for p in finished))
            raise
        return [t.result() for t in tasks]

    # -- training -------------------------------------------------------------------------

    async def _group(self, item: Item, report: TrainReport) -> list[RolloutRecord]:
        group_id = uuid.uuid4().hex
        played = await self._all(
            self._player.play(item, "train", group_id, self.config.sampling)
            for _ in range(self.config.group_size))
        whole = all(p.episodes is not None for p in played)
        records: list[RolloutRecord] = []
        try:
            for i, p in enumerate(played):
                record = p.record
                report.count(record.errors)
                report.failed_attempts += record.attempt + (0 if record.ok else 1)
                if p.episodes is not None and whole:
                    assert record.reward is not None
                    try:
                        for role, episode in list(p.episodes.items()):
                            await episode.end(record.rewards.get(role, record.reward))
                            del p.episodes[role]  # ended: nothing left to abort
                    except SwarmError as err:
                        # The server ended it first (a lapsed session lease aborts the
                        # session's open episodes), or is gone: a loss to count, not a
                        # reason to stop the run.
                        whole = False
                        report.count({"server": 1})
                        record = dataclasses.replace(record, error=f"could not end: {err}")
                        await p.abort("could not be ended")
                    else:
                        record = dataclasses.replace(record, trained=True)
                elif p.episodes is not None:
                    await p.abort("another rollout of its group failed")
                    record = dataclasses.replace(
                        record, error=record.error or "group aborted: another rollout failed")
                played[i] = Played(None, record)
                records.append(record)
                self._player.emit(record)
        except BaseException:  # stopped while ending: what is still open is aborted
            await asyncio.gather(*(p.abort("the run was stopped") for p in played))
            raise
        if whole:
            report.groups += 1
            report.rewards += [r.reward for r in records if r.reward is not None]
        else:
            report.groups_aborted += 1
            report.rollouts_lost += sum(r.trained for r in records)
        report.rollouts += len(records)
        return records

    async def _check_group_size(self) -> None:
        """Refuses a group_size other than the server's trainers' (of every model the run
        trains; once per runner)."""
        if self._group_size_checked:
            return
        models = await self.client.list_models()
        for name in self.config.trained_models(self.env):
            for m in models:
                if m.name == name or not name:
                    if m.group_size and m.group_size != self.config.group_size:
                        raise ValueError(
                            f"the runner's group_size is {self.config.group_size}, but the "
                            f"server's trainer of {m.name!r} groups {m.group_size} episodes "
                            f"(its group_size option); set them equal")
                    break
        self._group_size_checked = True

    async def _reached(self, version: int) -> bool:
        """Whether the served version reached `version`; a server out of reach has not
        (the rollouts count its failures, and stop the run if it stays away)."""
        try:
            return await self.policy_version() >= version
        except (UnavailableError, DeadlineExceededError) as err:
            _log.warning("policy_version_unknown", env=self.env.label, error=str(err)[:300])
            return False

    async def train(self, *, groups: int | None = None, seconds: float | None = None,
                    until_version: int | None = None) -> TrainReport:
        """Plays training groups until `groups` groups are done, `seconds` have passed or
        the served policy version reaches `until_version` (groups in flight then finish);
        `groups` or `seconds` must be given.

        Raises:
            RunStopped: An error that would recur (see the module docstring).
            ValueError: The train split has no item that is not held out, the
                group_size differs from the server's trainer's, or every role is frozen.
        """
        if groups is None and seconds is None:
            raise ValueError("train() needs groups or seconds")
        if not self.config.trained_models(self.env):
            raise ValueError(f"every role of {self.env.label} is frozen: nothing to train")
        report, t0 = TrainReport(), time.monotonic()
        deadline = t0 + seconds if seconds is not None else math.inf
        await self._splits.load()
        await self._check_group_size()
        in_flight: set[asyncio.Task[list[RolloutRecord]]] = set()
        width = max(1, math.ceil(self.config.concurrency / self.config.group_size)) + 1
        started, exhausted, reached = 0, False, False
        progress = Progress(self, f"{self.env.label} train", enabled=self.config.progress,
                            total=groups, seconds=seconds)
        try:
            with progress:
                while True:
                    if until_version is not None and not reached:
                        reached = await self._reached(until_version)
                    while (len(in_flight) < width and time.monotonic() < deadline
                           and (groups is None or started < groups) and not exhausted
                           and not reached):
                        item = await self._splits.next_train()  # a finite generator may end
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
                    for records in _results(done):
                        progress.add(records)
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
        """Holds the training of every model the environment's roles play for the block
        (`hold_training`, one hold per model under the runner's one holder: a step in
        progress lands first, none starts until the block ends) and yields the policy
        version served meanwhile (of the first model; `pins` has each). Evaluations
        inside play those versions, and a checkpoint saved inside holds their weights. A
        model nothing trains is pinned by construction. Holding needs an admin key on a
        server with keys. The holds are the client session's lease: a runner that dies
        leaves them to lapse. A server that restarts during the block loses them (they
        live in its memory): the block then ends with `PinLost`, as does an evaluation
        in it that saw other versions."""
        if self._pins:  # nested: the outer hold covers it
            yield next(iter(self._pins.values()))
            return
        holder = self.config.holder or f"swarmrl-runner-{uuid.uuid4().hex[:8]}"
        held: list[str] = []
        pins: dict[str, int] = {}
        # Holds live in the server's memory: a restart during the block loses them (PinLost).
        self._instance = (await self.client.status()).server_instance
        try:
            for model in self.config.played_models(self.env):
                try:
                    state = await self.client.hold_training(
                        model or None, holder=holder, reason=reason or "pinned evaluation")
                except FailedPreconditionError:  # not trained here: its version never changes
                    pins[model or await self._first_model()] = await self.policy_version(model)
                else:
                    held.append(state.model)
                    pins[state.model] = state.policy_version
            self._pins = pins
            yield next(iter(pins.values()))
            await self._check_pin()
        finally:
            self._pins = {}
            for model in held:
                await cleanup(self.client.release_training(model, holder=holder))

    async def _check_pin(self, detail: str = "") -> None:
        """Raises `PinLost` when the server is not the one the current pin held on."""
        now = (await self.client.status()).server_instance
        if now != self._instance:
            raise PinLost(f"{self.env.label}: the server restarted during a pinned block "
                          f"(instance {self._instance} -> {now}): its hold was lost{detail}")

    @property
    def pins(self) -> dict[str, int]:
        """Inside `pinned()`: each model held and its version."""
        return dict(self._pins)

    async def _first_model(self) -> str:
        models = await self.client.list_models()
        return models[0].name if models else ""

    async def restore(self, checkpoint: str, model: str | None = None) -> int:
        """Serves a checkpoint the server wrote as a new policy version (`restore_checkpoint`)
        of `model` (default: the run's) and returns it; inside `pinned()`, the block's
        evaluations then play it."""
        state = await self.client.restore_checkpoint(checkpoint,
                                                     model or self.config.model or None)
        if state.model in self._pins:
            self._pins[state.model] = state.policy_version
        return state.policy_version

    async def evaluate(self, split: Split = "val", *, k: int = 1, limit: int | None = None,
                       pin: bool = True) -> EvalReport:
        """Plays every item of `split` (val or test; the first `limit` items) `k` times,
        aborts every episode (never trained) and reports success or mean reward over
        every rollout, those that failed included (see `swarmrl.envs._report`).

        With `pin` (inside `pinned()` or holding on its own), every call of the held
        model plays one policy version, which the report names; an evaluation that saw
        another version raises.

        Raises:
            RunStopped: An error that would recur (see the module docstring).
        """
        if split not in ("val", "test"):
            raise ValueError(f"evaluate() plays val or test, not {split!r}")
        if not pin:
            return await self._evaluate(split, k, limit, None)
        async with self.pinned(f"evaluating {self.env.label} {split}") as version:
            pins = self.pins
            report = await self._evaluate(split, k, limit, version)
            stray = _stray(report, pins)
            if stray:  # a restart explains it (PinLost); anything else is a broken pin
                await self._check_pin(f"; {split} played versions {stray}")
                raise RuntimeError(f"{self.env.label} {split}: evaluation pinned to versions "
                                   f"{pins} played {stray}")
        return report

    async def _evaluate(self, split: Split, k: int, limit: int | None,
                        pinned: int | None) -> EvalReport:
        await self._splits.load()
        items = self.held_out(split)[:limit]
        sampling = self.config.eval_sampling if k == 1 else self.config.sampling
        t0 = time.monotonic()
        progress = Progress(self, f"{self.env.label} eval {split}",
                            enabled=self.config.progress, total=len(items) * k)

        async def one(item: Item) -> Played:
            played = await self._player.play(item, split, "", sampling,
                                             versions_of=self._pins)
            self._player.emit(played.record)
            progress.add([played.record])
            return played

        with progress:
            played = await self._all(one(i) for i in items for _ in range(k))
        return EvalReport(self.env.label, split, k, [p.record for p in played],
                          time.monotonic() - t0, pinned,
                          dict(self._pins) if len(self._pins) > 1 else {})

    async def policy_version(self, model: str | None = None) -> int:
        """The served version of `model` (default: the first trained role's model; -1 when
        unknown)."""
        name = self.config.trained_models(self.env)[0] if model is None and \
            self.config.trained_models(self.env) else (model or "")
        models = await self.client.list_models()
        for m in models:
            if m.name == name or not name:
                return m.policy_version
        return -1


def _stray(report: EvalReport, pins: Mapping[str, int]) -> list[int]:
    """Versions an evaluation played that are not its pins', model by model (the calls of
    the pinned models: every record names the versions of those calls per model)."""
    stray = {v for r in report.records for m, vs in r.model_versions.items()
             for v in vs if m in pins and v != pins[m]}
    if not any(r.model_versions for r in report.records):
        stray = set(report.policy_versions) - set(pins.values())
    return sorted(stray)


def _first(errors: Sequence[BaseException]) -> BaseException:
    """The error to raise for failed rollouts or groups: a `RunStopped` if there is one,
    else the first."""
    return next((e for e in errors if isinstance(e, RunStopped)), errors[0])


def _results(done: Iterable[asyncio.Task[list[RolloutRecord]]]) -> list[list[RolloutRecord]]:
    """The finished groups' records; every task's error is read (none is left for
    asyncio to warn of), and the first (`RunStopped` first) is raised."""
    results, errors = [], []
    for task in done:
        exc = task.exception()
        if exc is None:
            results.append(task.result())
        else:
            errors.append(exc)
    if errors:
        raise _first(errors)
    return results
