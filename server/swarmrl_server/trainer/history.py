"""History never rewinds: a durable log of every policy version ever issued.

A policy version, once issued, names one set of weights forever. Each version is
committed to the store's `policy_versions` log before the weights are served, so
after a crash the trainer knows every version that calls may carry. On restart it
continues from its latest checkpoint (weights of version V, step N) and:

- marks every version above V lost: those weights died with the process. Calls
  that carry a lost version are dropped from training (`lost_weights=drop`, counted
  as drop/lost_weights) or trained off-policy with the logprobs they were sampled
  with (`lost_weights=offpolicy`, counted as recovery/offpolicy_episodes);
- issues new versions above every version ever issued (never reusing a number);
- numbers new steps above every step ever taken, so metrics steps strictly increase;
  the lost steps N+1..M are reported in the next step's metrics (recovery/*), and
  the episodes they had consumed are trained again, once, and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from swarmrl_server.trainer.port import TrainingStore

LOST_WEIGHTS = ("drop", "offpolicy")


@dataclass
class Recovery:
    """What a restart found lost, reported once in the next step's metrics."""

    first_lost_step: int = 0
    last_lost_step: int = 0
    """0, 0 when no step was lost."""
    retrained_episodes: int = 0
    lost_versions: int = 0

    def metrics(self) -> dict[str, float]:
        lost = self.last_lost_step - self.first_lost_step + 1 if self.last_lost_step else 0
        return {
            "recovery/lost_steps": float(lost),
            "recovery/lost_steps_from": float(self.first_lost_step),
            "recovery/lost_steps_to": float(self.last_lost_step),
            "recovery/retrained_episodes": float(self.retrained_episodes),
            "recovery/lost_versions": float(self.lost_versions),
        }


@dataclass
class VersionHistory:
    """One model's view of the version log."""

    store: TrainingStore
    model: str
    issued_max: int = 0
    lost: set[int] = field(default_factory=set)
    top_step: int = 0

    async def recover(self, checkpoint_step: int, weights_version: int) -> Recovery:
        """Reconciles the log with the weights actually loaded (version `weights_version`,
        trained through `checkpoint_step`). Call before un-consuming later steps."""
        versions = await self.store.issued_versions(self.model)
        retrained, top_consumed = await self.store.consumed_after(self.model, checkpoint_step)
        top_logged = max((s for _, s, _ in versions), default=0)
        self.top_step = max(checkpoint_step, top_consumed, top_logged)
        newly_lost = await self.store.mark_versions_lost(self.model, weights_version)
        self.lost = {v for v, _, lost in versions if lost or v > weights_version}
        self.issued_max = max([weights_version, *(v for v, _, _ in versions)])
        recovery = Recovery(retrained_episodes=retrained, lost_versions=newly_lost)
        if self.top_step > checkpoint_step:
            recovery.first_lost_step, recovery.last_lost_step = checkpoint_step + 1, self.top_step
        if self.top_step > checkpoint_step or retrained or newly_lost:
            await self.store.record_recovery(  # durable, even if no step follows
                self.model, checkpoint_step, recovery.first_lost_step, recovery.last_lost_step,
                retrained)
        return recovery

    async def issue(self, current: int, step: int) -> int:
        """The next version: above every version ever issued, logged durably first."""
        version = max(current, self.issued_max) + 1
        await self.store.record_version(self.model, version, step)
        self.issued_max = version
        return version
