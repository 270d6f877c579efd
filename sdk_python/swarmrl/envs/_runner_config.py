"""How a runner plays: `RunnerConfig` (the runner's rules are in `swarmrl.envs._runner`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from swarmrl._sampling import SamplingParams
from swarmrl.envs._api import Environment
from swarmrl.envs._roles import RoleSpec, played_models, trained_models

__all__ = ["RunnerConfig"]


@dataclass(frozen=True)
class RunnerConfig:
    """How the runner plays."""

    group_size: int = 8
    """Rollouts per item in training (a GRPO group); must equal the trainer's group_size."""
    concurrency: int = 16
    """Rollouts playing at once (and the size of the shared connection pool; the event
    loop's default executor, which ``asyncio.to_thread`` uses, gets 4 threads more)."""
    rollout_timeout_s: float = 600.0
    """A rollout running longer fails (aborted; the policy's failure: not retried)."""
    retries: int = 1
    """Fresh attempts after a rollout failed for the environment's or the server's
    reasons (0: none)."""
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
    max_consecutive_failures: int = 16
    """Rollouts in a row that may fail for good (retries spent) for the environment's or
    the server's reasons before the run stops (`RunStopped`); 0: never."""
    holder: str = ""
    """The holder id of this runner's training holds (`pinned`); empty: a random one. A
    run folder's own id lets a resumed run re-adopt its hold: the runner releases that
    holder's earlier hold when it starts."""
    roles: Mapping[str, RoleSpec] = field(default_factory=dict)
    """The model of each role of the environment (``--role NAME=MODEL[:frozen]``); a role
    not named plays on `model`, trained."""

    def __post_init__(self) -> None:
        for name in ("group_size", "concurrency"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.retries < 0 or self.rollout_timeout_s <= 0:
            raise ValueError("retries must be >= 0 and rollout_timeout_s > 0")
        if self.max_consecutive_failures < 0:
            raise ValueError("max_consecutive_failures must be >= 0 (0: never stop)")

    def trained_models(self, env: Environment) -> list[str]:
        """The models `env`'s roles train ("" : the server's first model)."""
        return trained_models(env.roles, self.roles, self.model)

    def played_models(self, env: Environment) -> list[str]:
        """Every model `env`'s roles play, frozen ones' included."""
        return played_models(env.roles, self.roles, self.model)
