"""The swarm: the domain objects one server process holds, wired together.

Servicers (gRPC) and routers (HTTP) are thin layers over this object; tests and
benchmarks can drive it directly, in-process, without either.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from swarmrl_server.episodes.clients import (
    AgentVersionSummary,
    ClientSummary,
    LiveSession,
    list_clients,
)
from swarmrl_server.episodes.registry import EpisodeRegistry
from swarmrl_server.episodes.resolve import GenerationPolicy
from swarmrl_server.episodes.sessions import SessionTable
from swarmrl_server.errors import Reason, invalid, not_found, precondition
from swarmrl_server.events import EventLog
from swarmrl_server.hosting import ModelHost, TrainerHandle
from swarmrl_server.observe.telemetry import GaugeSample, Telemetry
from swarmrl_server.pauses import ADMIN, Pauses
from swarmrl_server.security import IN_PROCESS, EpisodeKeys, Principal, load_secret
from swarmrl_server.store.records import EpisodeRecord, EpisodeState
from swarmrl_server.store.sqlite import SqliteStore

log = structlog.get_logger("swarmrl.swarm")


@dataclass(frozen=True)
class TrainingHold:
    """A hold of a model's training, as GetStatus lists it."""

    model: str
    holder: str
    reason: str
    session_id: str
    """The session it lasts with; "" for a hold on a lease of its own."""
    since: float
    """When the holder first took it (seconds since the epoch)."""
    expires_at: float
    """When it lapses unless renewed: its session's lease expiry, or its own lease's."""


class Swarm:
    """Models, store, sessions, episodes and events of one server."""

    def __init__(
        self,
        models: dict[str, ModelHost],
        *,
        data_dir: Path | None = None,
        policy: GenerationPolicy | None = None,
    ) -> None:
        if not models:
            raise ValueError("a swarm needs at least one model")
        self.models = models
        self.data_dir = data_dir
        self.instance = uuid.uuid4().hex
        self.store = SqliteStore(":memory:" if data_dir is None else data_dir / "swarm.sqlite3")
        self.events = EventLog(self.store)
        self.telemetry = Telemetry()
        self.pauses = Pauses(models, self.events)
        """Who holds which model's generation paused (the admin, each model's trainer)."""
        self.telemetry.add_gauges(self._live_gauges)
        self.sessions = SessionTable(self.store, self._abort_session)
        self.episodes = EpisodeRegistry(
            self.store, models, EpisodeKeys(load_secret(data_dir)), policy=policy,
            wait_generating=self.pauses.wait_generating,
            require_session=lambda session_id, caller: self.sessions.require(
                session_id, caller=caller),
            on_ended=self._episode_ended,
            telemetry=self.telemetry,
        )
        self._agent_versions: dict[str, str] = {}
        """Agent version each session declared when it opened (clients re-declare it
        whenever they reopen, e.g. after a server restart, so memory is enough)."""
        self.openai_base_url = ""
        """Set by the HTTP shim once it listens, e.g. http://127.0.0.1:8000/v1."""

    async def start(self) -> None:
        await self.store.open()
        await self.sessions.load()
        await self.episodes.load()
        self.telemetry.set_episode_counts({
            k: v for k, v in (await self.store.counts()).items() if k != EpisodeState.OPEN.value})
        for host in self.models.values():
            await host.engine.start()
        self.sessions.start_reaper()
        log.info("swarm_started", models=list(self.models), data_dir=str(self.data_dir))

    async def stop(self) -> None:
        await self.sessions.stop_reaper()
        await self.events.close()
        for host in self.models.values():
            if host.trainer is not None:
                await host.trainer.stop()
            await host.engine.stop()
        await self.store.close()

    async def _abort_session(self, session_id: str, reason: str) -> int:
        """A session ended (closed, or its lease ran out): its open episodes are aborted
        and the holds of training bound to it lapse."""
        aborted = await self.episodes.abort_session(session_id, reason)
        for host in self.models.values():
            if host.trainer is not None:
                host.trainer.lapse_holds()
        return aborted

    async def _episode_ended(self, record: EpisodeRecord) -> None:
        for name in record.models:
            trainer = self.models[name].trainer
            if trainer is not None:
                trainer.notify_episode_ended(record)

    def _live_gauges(self) -> list[GaugeSample]:
        """What /metrics reads at scrape time: open episodes, sessions, versions, queues."""
        out = [
            GaugeSample("episodes", "Episodes by state", {"state": EpisodeState.OPEN.value},
                        float(self.episodes.open_count)),
            GaugeSample("sessions", "Client sessions with a live lease", {}, float(len(self.sessions))),
            GaugeSample("generation_paused", "1 while generation is paused", {},
                        float(self.paused_reason is not None)),
            GaugeSample("generation_waiting", "Calls waiting for a pause of their model to lift",
                        {}, float(self.pauses.waiting)),
        ]
        depth = "Requests waiting, by model and queue"
        for name, host in self.models.items():
            labels = {"model": name}
            out.append(GaugeSample("policy_version", "Policy version served", labels,
                                   float(host.engine.policy_version)))
            out.append(GaugeSample("queue_depth", depth, {**labels, "queue": "inflight"},
                                   float(self.episodes.inflight(name))))
            stats = getattr(host.engine, "stats", None)  # HFEngine's scheduler counters
            if stats is not None:
                out.append(GaugeSample("queue_depth", depth, {**labels, "queue": "engine_waiting"},
                                       float(stats.waiting)))
                out.append(GaugeSample("queue_depth", depth, {**labels, "queue": "engine_running"},
                                       float(stats.active_rows)))
            if host.trainer is not None:
                out.append(GaugeSample("queue_depth", depth,
                                       {**labels, "queue": "trainer_pending"},
                                       float(host.trainer.pending)))
                holds = host.trainer.list_holds()
                out.append(GaugeSample("training_holds", "Holds of a model's training now",
                                       labels, float(len(holds))))
                out.append(GaugeSample(
                    "training_hold_oldest_age_seconds",
                    "Age of the oldest hold of a model's training (0 when none)", labels,
                    max(0.0, time.time() - holds[0].since) if holds else 0.0))
        return out

    # -- admin ---------------------------------------------------------------------

    @property
    def paused_reason(self) -> str | None:
        """Why generation of some model is paused (the oldest pause's reason), or None."""
        return self.pauses.any_reason()

    async def pause(self, reason: str) -> None:
        """The admin pauses generation of every model (a second pause keeps the first
        reason)."""
        await self.pauses.hold(ADMIN, reason or "paused by admin")

    async def resume(self) -> None:
        """Lifts the admin's pause (a trainer's pause of its own model stays)."""
        await self.pauses.release(ADMIN)

    def note_agent_version(self, session_id: str, agent_version: str) -> None:
        """Records the agent version a session declared (the default of its episodes)."""
        self._agent_versions[session_id] = agent_version

    def session_agent_version(self, session_id: str) -> str:
        return self._agent_versions.get(session_id, "")

    async def list_clients(self) -> tuple[list[ClientSummary], list[AgentVersionSummary]]:
        """Live clients (by client name) and every agent version's episode counts."""
        live = [self.sessions.require(s, caller=IN_PROCESS) for s in self.sessions.ids()]
        for gone in set(self._agent_versions) - {s.session_id for s in live}:
            del self._agent_versions[gone]
        return await list_clients(self.store, sorted(
            (LiveSession(s.session_id, s.client_name, self.session_agent_version(s.session_id),
                         s.expires_at) for s in live),
            key=lambda s: (s.client_name, s.session_id)))

    def active_session_ids(self) -> set[str]:
        """Ids of the client sessions whose lease is live (the trainer's "clients" batch rule)."""
        return self.sessions.ids()

    def declare_done(
        self, session_id: str, model: str = "", *, caller: Principal
    ) -> None:
        """A client declares its share of the current batch done, for `model` (or every
        trainable model): with batch_rule=clients a batch is ready once every active
        client has."""
        self.sessions.require(session_id, caller=caller)
        for trainer in self._trainers(model, "declare done for"):
            trainer.declare_done(session_id)

    async def policy_version_changed(self, model: str, version: int) -> None:
        await self.events.append("policy_version_changed", model=model, policy_version=version)

    async def save_checkpoints(self, model: str = "") -> list[Path]:
        """Checkpoints `model` (or every trainable model) now, on a client's request: each
        is kept outside the automatic retention until `delete_checkpoint`."""
        return [await t.save_checkpoint(kept=True) for t in self._trainers(model, "checkpoint")]

    async def delete_checkpoint(self, model: str, path: str) -> tuple[str, Path]:
        """Removes one checkpoint of `model` (the only trainable model when empty); returns
        (model, the directory removed)."""
        trainer = self._one_trainer(model, "delete a checkpoint of")
        return trainer.name, await trainer.delete_checkpoint(path)

    async def hold_training(self, model: str, holder: str, reason: str, *,
                            session_id: str = "", lease_s: float | None = None
                            ) -> tuple[str, int, int]:
        """Holds the training of `model` (the only trainable model when empty) for
        `holder`, a lease: bound to the live session `session_id` (NOT_FOUND otherwise),
        or lasting `lease_s` unless renewed (`trainer.holds`); returns (model, policy
        version served meanwhile, step). HoldTraining needs an admin key, and an admin
        may name any session."""
        trainer = self._one_trainer(model, "hold")
        version, step = await trainer.hold(holder or "admin", reason, session_id=session_id,
                                           lease_s=lease_s)
        return trainer.name, version, step

    def release_training(self, model: str, holder: str) -> None:
        """Lifts `holder`'s hold of `model`'s training."""
        self._one_trainer(model, "release").release(holder or "admin")

    def training_hold(self, model: str, holder: str) -> TrainingHold | None:
        """`holder`'s hold of `model`'s training, if it lasts."""
        return next((h for h in self.training_holds(model) if h.holder == (holder or "admin")),
                    None)

    def training_holds(self, model: str = "") -> list[TrainingHold]:
        """The holds of training that last now (of `model`, or of every model), by model,
        the oldest first."""
        out = []
        for name, host in self.models.items():
            if host.trainer is None or (model and name != model):
                continue
            for hold in host.trainer.list_holds():
                expires = (self.sessions.expiry(hold.session_id) or 0.0 if hold.session_id
                           else hold.expires_at)
                out.append(TrainingHold(name, hold.holder, hold.reason, hold.session_id,
                                        hold.since, expires))
        return out

    async def restore_checkpoint(self, model: str, path: str) -> tuple[str, int, int]:
        """Serves a checkpoint of `model` as a new policy version; returns (model, policy
        version, the checkpoint's step)."""
        trainer = self._one_trainer(model, "restore")
        if not path:
            raise invalid("path", "a checkpoint directory is required")
        try:
            version, step = await trainer.restore(Path(path))
        except (FileNotFoundError, ValueError) as err:
            raise invalid("path", str(err)) from None
        return trainer.name, version, step

    def _one_trainer(self, model: str, action: str) -> TrainerHandle:
        """The trainer of `model`, or the only trainable model's when `model` is empty."""
        trainers = self._trainers(model, action)
        if len(trainers) > 1:
            raise invalid("model", f"several models train here: name the one to {action}")
        return trainers[0]

    def _trainers(self, model: str, action: str) -> list[TrainerHandle]:
        """The trainer of `model`, or of every trainable model when `model` is empty."""
        if model and model not in self.models:
            raise not_found(Reason.MODEL_NOT_FOUND, "model", model)
        hosts = [self.models[model]] if model else list(self.models.values())
        trainers = [h.trainer for h in hosts if h.trainer is not None]
        if not trainers:
            raise precondition(Reason.NOT_TRAINABLE, f"no trainable model to {action}")
        return trainers

    async def status(self) -> dict[str, Any]:
        counts = await self.store.counts()
        return {
            "server_instance": self.instance,
            "sessions": len(self.sessions),
            "open_episodes": self.episodes.open_count,
            "ended_episodes": counts.get(EpisodeState.ENDED.value, 0),
            "aborted_episodes": counts.get(EpisodeState.ABORTED.value, 0),
            "paused": self.paused_reason is not None,
            "last_event_sequence": await self.store.last_event_sequence(),
        }
