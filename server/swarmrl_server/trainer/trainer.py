"""The trainer of one hosted model: ended episodes in, new weights out.

Loop: wait for ended episodes → the batcher says a batch is ready → drop what is
too stale (counted) → advantages and loss from verl → AdamW step (on a worker
thread, so the gRPC event loop keeps serving) → policy version + 1 → weights
pushed to the engine → episodes marked consumed in the store → metrics →
checkpoint when due.

The trainer sees the server only through its `TrainingPort` (port.py): the store's
reads and its ledger, a metrics sink, its own pause holder of its model, and where new
weights go. It owns its own copy of the model (in its `WorkerGroup`, workers.py),
loaded from the model's directory: on CPU trainer and engine could share a module, but
on GPU they are different processes, and the interface is the same for both.

Exactly once: an episode is consumed (trained or dropped) in exactly one step,
recorded in the store with that step. A restarted server resumes from a
checkpoint, un-consumes the episodes of later steps and trains them again; every
ended episode that no step consumed is picked up at start.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import structlog

from swarmrl_server.errors import Reason, precondition
from swarmrl_server.observe import metrics
from swarmrl_server.store.records import EpisodeRecord, EpisodeState
from swarmrl_server.timelines.grammar import GrammarReplay
from swarmrl_server.timelines.pack import plan_packing
from swarmrl_server.trainer import breakdown, checkpoint, selection
from swarmrl_server.trainer.batching import Batcher, BatchPlan
from swarmrl_server.trainer.config import TrainerConfig, TrainerConfigError
from swarmrl_server.trainer.history import LOST_WEIGHTS, Recovery, VersionHistory
from swarmrl_server.trainer.holds import Hold, Holds, check_binding
from swarmrl_server.trainer.port import TrainingPort
from swarmrl_server.trainer.step import batch_advantages, generated_mask
from swarmrl_server.trainer.workers import GroupFactory, LocalGroup, WorkerGroup

log = structlog.get_logger("swarmrl.trainer")

POLL_S = 1.0
"""How often the loop re-checks without a wake-up (client sessions come and go)."""


class Trainer:
    """Trains one model on the episodes that call it."""

    def __init__(
        self, port: TrainingPort, config: TrainerConfig, *,
        start_group: GroupFactory = LocalGroup, log_dir: Path | None = None,
    ) -> None:
        self.port = port
        self._start_group = start_group
        self.name = port.model
        self.config = config
        self.data_dir = port.data_dir
        self.log_dir = log_dir if log_dir is not None else port.data_dir
        self.batcher = Batcher(config, model=port.model)
        self.step = 0
        self.policy_version = 0
        self.last_checkpoint_step = -1
        self.dropped_total: dict[str, int] = {}
        self.not_called = 0
        """Ended episodes that listed this model but never called it: nothing to train."""
        self.error: BaseException | None = None
        """Set when a step failed; training stops, the server keeps serving."""
        self._pending: dict[str, EpisodeRecord] = {}
        self._new: list[str] = []
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # a step, a checkpoint and a restore never overlap
        self._holds = Holds()
        """While any holds, no step starts (`hold`); each is a lease (trainer/holds.py)."""
        self._last_step_end = time.monotonic()
        self._unreported: dict[str, int] = {}
        self.history = VersionHistory(port.store, port.model)
        self.recovery = Recovery()
        self._recovery_unreported = True
        self.offpolicy_lost = 0
        self.group: WorkerGroup | None = None
        """Whoever holds the weights and runs the steps (started by `start_group`)."""
        self.writer: metrics.MetricsWriter | None = None
        self.grammar = (GrammarReplay.for_model(port.weights_dir)
                        if config.trains_constrained else None)
        """Replays constrained calls' grammars, so that their forced tokens leave the loss
        (`timelines.grammar`); None trains those calls as context."""

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self, resume: Path | None = None) -> None:
        """Loads the model (and a checkpoint), picks up unconsumed episodes, starts the loop."""
        self.group = group = await asyncio.to_thread(self._start_group, self.port.weights_dir, self.config)
        store = self.port.store
        if self.config.lost_weights not in LOST_WEIGHTS:
            raise TrainerConfigError(f"lost_weights must be one of {LOST_WEIGHTS}")
        if resume is None and self.data_dir is not None:
            root = checkpoint.checkpoint_root(self.data_dir, self.name)
            if checkpoint.list_steps(root):  # a plain restart continues, never starts over
                resume = root
        if resume is not None:
            path = checkpoint.resolve(resume, self.name)
            state = await asyncio.to_thread(group.load, path)
            if state.model != self.name:
                raise TrainerConfigError(
                    f"checkpoint {path} is of model {state.model!r}, not {self.name!r}")
            self.step = self.last_checkpoint_step = state.step
            self.policy_version = state.policy_version
            self.recovery = await self.history.recover(state.step, state.policy_version)
            # Steps after the checkpoint never happened as far as the weights know.
            await store.forget_consumed_after(self.name, state.step)
            self.step = self.last_checkpoint_step = self.history.top_step
            known = await store.consumed_episodes(self.name)
            missing = [e for e in state.consumed if e not in known]
            if missing:  # a checkpoint carried into a fresh data dir still trains nothing twice
                await store.mark_consumed(self.name, missing, state.step)
            await self._push_weights()
            log.info("trainer_resumed", model=self.name, checkpoint=str(path), step=self.step,
                     policy_version=self.policy_version)
        else:
            self.policy_version = self.port.weights.served_version
            # No checkpoint: whatever was trained before is lost with its weights.
            self.recovery = await self.history.recover(0, self.policy_version)
            await store.forget_consumed_after(self.name, 0)
            self.step = self.last_checkpoint_step = self.history.top_step
        if self.recovery.last_lost_step or self.recovery.lost_versions:
            log.warning("trainer_recovered", model=self.name, step=self.step,
                        **self.recovery.metrics())
        self.not_called = await store.queued_not_called(self.name)
        for record in await store.unconsumed_ended_episodes(self.name):
            self._pending[record.episode_id] = record
        if self.data_dir is not None:  # every option's value, defaults too: for run cards
            config_file = self.data_dir / f"trainer-config-{self.name}.json"
            config_file.write_text(json.dumps(self.config.to_dict(), indent=1, default=str) + "\n")
        self.writer = metrics.MetricsWriter(
            self.name, self.log_dir, progress=self.config.progress,
            total_steps=self.config.max_steps or None, initial_step=self.step,
        )
        self._task = asyncio.create_task(self._run(), name=f"trainer-{self.name}")
        self._wake.set()

    async def stop(self) -> None:
        """Finishes the step in progress, checkpoints (if configured) and stops."""
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if (self.config.checkpoint_on_stop and self.data_dir is not None and self.error is None
                and self.step > max(self.last_checkpoint_step, 0)):
            await self.save_checkpoint()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        if self.group is not None:
            await asyncio.to_thread(self.group.close)
            self.group = None

    # -- inputs ------------------------------------------------------------------------

    def notify_episode_ended(self, record: EpisodeRecord) -> None:
        """Called by the swarm when an episode that lists this model ends."""
        self._new.append(record.episode_id)
        self._wake.set()

    def declare_done(self, session_id: str) -> None:
        """A client declares its share of the current batch done (batch_rule=clients)."""
        self.batcher.declare_done(session_id)
        self._wake.set()

    @property
    def pending(self) -> int:
        """Ended episodes waiting to be trained."""
        return len(self._pending)

    def pending_records(self) -> list[EpisodeRecord]:
        """The ended episodes waiting to be trained (for the live console)."""
        return list(self._pending.values())

    # -- checkpoints -------------------------------------------------------------------

    async def save_checkpoint(self, *, kept: bool = False) -> Path:
        """Checkpoints now. `kept` (a client asked for it): the checkpoint is marked kept on
        request, outside keep_checkpoints' retention, until `delete_checkpoint` (checkpoint.py)."""
        self._checkpoint_root("cannot checkpoint")
        async with self._lock:
            return await self._save_checkpoint_locked(kept=kept)

    async def delete_checkpoint(self, path: str) -> Path:
        """Removes one checkpoint of this model (a `save_checkpoint` path), by checkpoint.py's
        `delete` rules; never while a save, step or restore runs. Returns the directory."""
        root = self._checkpoint_root("has no checkpoints")
        async with self._lock:
            removed = await asyncio.to_thread(checkpoint.delete, root, path)
        log.info("checkpoint_deleted", model=self.name, path=str(removed))
        return removed

    async def restore(self, path: Path) -> tuple[int, int]:
        """Loads a checkpoint this trainer wrote (weights, optimizer, rng) and serves its
        weights as a new policy version; training, when it goes on, goes on from there.
        `path` is a checkpoint directory, or its step (``12``, ``step-12``). The step
        counter and the ledger of consumed episodes are kept: episodes trained after the
        checkpoint are not trained again. Returns (policy version, the checkpoint's step)."""
        assert self.group is not None
        root = checkpoint.checkpoint_root(self.data_dir, self.name) if self.data_dir else None
        step = checkpoint.by_step(root, str(path)) if root is not None else None
        resolved = checkpoint.resolve(step or path, self.name)
        if root is None or not resolved.resolve().is_relative_to(root.resolve()):
            # Only what this trainer wrote: a path from a client never picks another file.
            raise ValueError(f"{path} is not a checkpoint of {self.name!r} under {root}")
        async with self._lock:
            state = await asyncio.to_thread(self.group.load, resolved)
            if state.model != self.name:
                raise TrainerConfigError(
                    f"checkpoint {resolved} is of model {state.model!r}, not {self.name!r}")
            self.policy_version = await self.history.issue(self.policy_version, self.step)
            await self._push_weights()
        log.info("trainer_restored", model=self.name, checkpoint=str(resolved),
                 checkpoint_step=state.step, policy_version=self.policy_version)
        return self.policy_version, state.step

    def _checkpoint_root(self, why: str) -> Path:
        """The model's checkpoint folder; refused when the server keeps no data dir."""
        if self.data_dir is None:
            raise precondition(Reason.NOT_TRAINABLE,
                               f"the server keeps no data dir (--data-dir), so it {why}")
        return checkpoint.checkpoint_root(self.data_dir, self.name)

    async def _save_checkpoint_locked(self, *, kept: bool = False) -> Path:
        assert self.data_dir is not None and self.group is not None
        root = checkpoint.checkpoint_root(self.data_dir, self.name)
        consumed = await self.port.store.consumed_episodes(self.name)
        state = checkpoint.TrainerState(
            model=self.name, step=self.step, policy_version=self.policy_version,
            config=self.config.to_dict(),
            consumed=sorted(e for e, s in consumed.items() if s <= self.step),
        )
        path = await asyncio.to_thread(self.group.save, root, state, source_dir=self.port.weights_dir,
                                       keep=self.config.keep_checkpoints)
        if kept:  # under the lock: no other save prunes it before it is marked
            await asyncio.to_thread(checkpoint.mark_kept, path)
        self.last_checkpoint_step = self.step
        log.info("checkpoint_saved", model=self.name, step=self.step, path=str(path))
        return path

    # -- holds (a pinned evaluation; leases, whose rules are trainer/holds.py's) -------

    async def hold(self, holder: str, reason: str, *, session_id: str = "",
                   lease_s: float | None = None) -> tuple[int, int]:
        """Holds training for `holder`: no step starts until it calls `release` or the
        hold lapses (with its session `session_id`, or after `lease_s` without a renewal:
        trainer/holds.py). Waits for a step in progress (its weights pushed) and lifts this
        trainer's own generation pause, so the model keeps generating at one version.
        Returns (policy version, step). Holds of different holders stack; holding again
        keeps the holder's one hold and re-binds it."""
        # Refused before waiting out a step; checked again after (a session may end).
        check_binding(session_id, lease_s, self.port.active_sessions())
        async with self._lock:  # a step in progress ends, weights served, before this
            hold, new = self._holds.take(holder, reason, session_id=session_id,
                                         lease_s=lease_s, now=time.time(),
                                         live_sessions=self.port.active_sessions())
        await self._resume_generation()
        log.info("trainer_held" if new else "trainer_hold_renewed", model=self.name,
                 holder=holder, reason=hold.reason, session_id=session_id or None,
                 lease_s=hold.lease_s or None, policy_version=self.policy_version,
                 step=self.step)
        return self.policy_version, self.step

    def release(self, holder: str) -> None:
        """Lifts `holder`'s hold (a no-op when it holds none); training goes on when no
        hold is left."""
        if self._holds.release(holder) is not None:
            log.info("trainer_released", model=self.name, holder=holder)
            self._wake.set()

    def lapse_holds(self) -> int:
        """Drops the holds that lapsed (their session ended, or their lease ran out):
        each is logged and counted, and training goes on. Run by the loop at every wake
        (at least every POLL_S) and by the server when a session ends. Returns how many."""
        now = time.time()
        lapsed = self._holds.lapse(now, self.port.active_sessions())
        for hold, cause in lapsed:
            log.warning("trainer_hold_lapsed", model=self.name, holder=hold.holder,
                        reason=hold.reason, cause=cause, session_id=hold.session_id or None,
                        held_s=round(now - hold.since, 1))
            self.port.metrics.hold_lapsed(self.name, cause)
        if lapsed:
            self._wake.set()
        return len(lapsed)

    def list_holds(self) -> list[Hold]:
        """The holds that last now, the oldest first."""
        return self._holds.live(time.time(), self.port.active_sessions())

    @property
    def holds(self) -> dict[str, str]:
        """Who holds training now, and why."""
        return {h.holder: h.reason for h in self.list_holds()}

    def _held(self) -> bool:
        """Whether a hold that has not lapsed stops training now."""
        self.lapse_holds()
        return bool(self._holds)

    # -- the loop ----------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while not self._stopping:
                try:
                    await asyncio.wait_for(self._wake.wait(), POLL_S)
                except TimeoutError:
                    pass
                self._wake.clear()
                while not self._stopping and not self._held():
                    plan = await self._next_plan()
                    await self._pace()
                    if plan is None:
                        break
                    async with self._lock:
                        if self._held():  # a hold taken while this plan was made wins
                            break
                        await self._train(plan)
                    if self.config.max_steps and self.step >= self.config.max_steps:
                        log.info("trainer_max_steps", model=self.name, step=self.step)
                        return
        except Exception as exc:  # a bug must not take the server down; it stops training
            self.error = exc
            log.exception("trainer_failed", model=self.name, step=self.step)
        finally:
            await self._resume_generation()

    async def _pace(self) -> None:
        """Back-pressure: pause generation while too much ready work waits (max_pending)."""
        limit = self.config.max_pending
        if not limit or self._holds:  # held, the work waits on purpose: generation goes on
            return
        ready = self.batcher.ready_episodes
        if ready > limit and not self._stopping:
            await self._pause_generation(f"trainer of {self.name} is behind: {ready} episodes wait")
        elif ready <= limit // 2:
            await self._resume_generation()

    async def _pause_generation(self, reason: str) -> None:
        """Pauses generation of this trainer's model only (its own pause holder)."""
        await self.port.pause.hold(reason)

    async def _resume_generation(self) -> None:
        """Lifts this trainer's pause (never an admin's or another holder's)."""
        await self.port.pause.release()

    async def _next_plan(self) -> BatchPlan | None:
        # Drained until no episode ended while the store was read: then, with no await
        # before the plan, each ended episode is pending here or still open to the
        # registry, never neither (it hands an episode over in the step it leaves its open
        # set), so the batcher's seal of groups with an open episode holds.
        while self._new:
            new, self._new = self._new, []
            for episode_id in new:
                record = await self.port.store.get_episode(episode_id, with_calls=True)
                if record is None or record.state is not EpisodeState.ENDED:
                    continue
                if any(c.model == self.name for c in record.calls):
                    self._pending[episode_id] = record
                else:
                    self.not_called += 1
        return self.batcher.plan(list(self._pending.values()), self.port.active_sessions(),
                                 self.port.open_groups())

    async def _train(self, plan: BatchPlan) -> None:
        assert self.group is not None and self.writer is not None
        t0 = time.monotonic()
        wait_s = t0 - self._last_step_end
        dropped: dict[str, list[EpisodeRecord]] = {k: list(v) for k, v in plan.dropped.items()}
        chosen = selection.select(
            plan, dropped, model=self.name, config=self.config,
            policy_version=self.policy_version, lost=self.history.lost,
            choices=self.grammar.choices if self.grammar else None)
        self.offpolicy_lost += chosen.offpolicy
        episodes, staleness, merged = chosen.rows, chosen.staleness, chosen.merged
        if episodes and self.config.packing:  # the batch's packing ratio, for the metrics
            plan_packing([r for e in episodes for r in e.rows], self.group.shape,
                         stats=merged)
        values: dict[str, float] = {}
        if episodes and self.config.mode == "sync":
            await self._pause_generation(f"training step {self.step + 1} of {self.name}")
        try:
            if episodes:
                advantages_E_L = batch_advantages(episodes, self.config)
                stats = await asyncio.to_thread(self.group.step, episodes, advantages_E_L)
                t_push = time.monotonic()
                # Logged durably before use, above every version ever issued.
                self.policy_version = await self.history.issue(self.policy_version, self.step + 1)
                await self._push_weights()
                values.update(stats.to_metrics())
                values["time/push_s"] = time.monotonic() - t_push
                values.update(metrics.advantage_metrics(advantages_E_L, generated_mask(episodes)))
            step = self.step + 1
            consumed = [e.episode_id for e in plan.episodes] + [
                e.episode_id for es in plan.dropped.values() for e in es]
            await self.port.store.mark_consumed(self.name, consumed, step)
        finally:
            if self.config.mode == "sync":
                await self._resume_generation()
        for episode_id in consumed:
            self._pending.pop(episode_id, None)
        if not episodes:  # only drops: counted now, reported with the next step's metrics
            for reason, records in dropped.items():
                self._unreported[reason] = self._unreported.get(reason, 0) + len(records)
                self.dropped_total[reason] = self.dropped_total.get(reason, 0) + len(records)
            self.port.metrics.episodes_dropped_by(
                self.name, {k: len(v) for k, v in dropped.items()})
            log.info("episodes_dropped", model=self.name,
                     **{k: len(v) for k, v in dropped.items()})
            return
        self.step = step
        values.update(metrics.reward_metrics([e.reward for e in episodes],
                                             [e.task_id for e in episodes]))
        values.update(breakdown.step_breakdown(
            {e.episode_id: e for e in plan.episodes}, episodes, staleness, dropped))
        values.update(metrics.staleness_metrics(staleness))
        values.update(metrics.sync_metrics([r for e in episodes for r in e.rows]))
        values.update(metrics.merge_metrics(merged))
        self._count_drops(dropped, values)
        self.port.metrics.episodes_dropped_by(self.name, {k: len(v) for k, v in dropped.items()})
        values.update({
            "actor/policy_version": float(self.policy_version), "actor/lr": self.config.lr,
            "batch/groups": float(len(plan.groups)), "batch/pending": float(len(self._pending)),
            "batch/not_called_total": float(self.not_called),
            "time/step_s": time.monotonic() - t0, "time/wait_s": wait_s,
        })
        if self._recovery_unreported:
            values.update(self.recovery.metrics())
            self._recovery_unreported = False
        values["recovery/offpolicy_episodes"] = float(self.offpolicy_lost)
        self.writer.write(self.step, values, staleness=staleness)
        self.port.metrics.trainer_step(self.name, self.step, values, staleness)
        self._last_step_end = time.monotonic()
        log.debug("train_step", model=self.name, step=self.step, reward=values.get("reward/mean"),
                  loss=values.get("loss/total"))
        if (self.config.checkpoint_every and self.data_dir is not None
                and self.step % self.config.checkpoint_every == 0):
            await self._save_checkpoint_locked()

    def _count_drops(
        self, dropped: dict[str, list[EpisodeRecord]], values: dict[str, float]
    ) -> None:
        """drop/<reason> (since the last step's metrics) and drop/total_<reason>."""
        counts = dict(self._unreported)
        self._unreported.clear()
        for reason, records in dropped.items():
            counts[reason] = counts.get(reason, 0) + len(records)
            self.dropped_total[reason] = self.dropped_total.get(reason, 0) + len(records)
        usual = ("stale", "uniform_rewards", "no_tokens", "group_too_small")
        reasons = dict.fromkeys((*usual, *counts))
        for reason in reasons:
            self.dropped_total.setdefault(reason, 0)
            values[f"drop/{reason}"] = float(counts.get(reason, 0))
            values[f"drop/total_{reason}"] = float(self.dropped_total[reason])
        values["stale/dropped"] = values["drop/stale"]

    async def _push_weights(self) -> None:
        """Serves the trainer's weights at its policy version and tells the clients."""
        assert self.group is not None
        state = await asyncio.to_thread(self.group.weights)
        await self.port.weights.push(state, self.policy_version)
