"""Why a rollout failed, and which failures stop a run.

Every failed attempt gets one of four kinds (the ``errors`` of a report count them):

- ``"timeout"``: the rollout ran past ``rollout_timeout_s``. The policy's doing (a model
  that talks for ever, or whose output sends the environment into a loop).
- ``"policy"``: the environment rejected the model's output by raising `PolicyError`.
- ``"environment"``: `play()` raised anything else: the environment's own bug, or its
  infrastructure (a sandbox, an environment server) failing.
- ``"server"``: a call to the swarm server failed (the server restarted, the network
  went away), in the runner's RPCs or in the rollout's model calls.

Policy failures are the policy's score: a `PolicyError` ends its rollout with the
error's reward and is trained like any outcome; a timeout fails its rollout (never
trained; its group is aborted) and is counted. Environment and server failures say
nothing about the policy: the rollout is retried as a fresh episode, and counted apart.

Errors that will recur on every rollout stop the run at once (`RunStopped`), since
retrying them would only burn the budget: a `TypeError`, `AttributeError` or
`NameError` from `play()` (a bug in the environment's code), and a server's
INVALID_ARGUMENT, PERMISSION_DENIED, UNAUTHENTICATED or NOT_FOUND (a bad option, a bad
key, an unknown model). NOT_FOUND for an episode, session or call is not among them: a
restarted server or a lapsed lease loses those, and a fresh episode gets new ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from swarmrl._errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    SwarmError,
    UnauthenticatedError,
)

if TYPE_CHECKING:
    from swarmrl.envs._api import Item

__all__ = ["KINDS", "FailureKind", "PinLost", "PolicyError", "RunStopped", "classify",
           "is_fatal"]

FailureKind = Literal["timeout", "policy", "environment", "server"]
KINDS: tuple[FailureKind, ...] = ("timeout", "policy", "environment", "server")

_LOST_WITH_THE_SERVER = frozenset({"EPISODE_NOT_FOUND", "SESSION_NOT_FOUND", "CALL_NOT_FOUND"})
"""NOT_FOUND reasons that a server restart (or a lapsed lease) causes: not fatal."""


class PolicyError(Exception):
    """Raised by `Environment.play` when the model's output is unusable: a tool call the
    environment cannot parse, an action outside the game's rules, an answer cut by the
    token limit. It is the policy's failure, not the environment's: the runner ends the
    rollout's episode with `reward` (default 0.0) and trains on it like any outcome, so a
    policy that learns to break its environment scores worse, never better. Evaluation
    counts the rollout as played and not solved, with that reward.

    Raise anything else for the environment's own failures (a crashed sandbox, a lost
    connection): those are retried as fresh episodes and never trained.

    .. code-block:: python

        try:
            action = json.loads(completion.text)
        except json.JSONDecodeError as exc:
            raise PolicyError(f"not JSON: {exc}", reward=-1.0) from exc
    """

    def __init__(self, message: str = "", *, reward: float = 0.0) -> None:
        super().__init__(message)
        self.reward = float(reward)
        """The rollout's reward (its episode is ended with it)."""


class RunStopped(RuntimeError):
    """A training or evaluation run stopped on an error that would recur on every rollout
    (see this module's docstring), or after too many failed rollouts in a row. In-flight
    rollouts were aborted before it was raised.

    Attributes:
        item: The `Item` whose rollout raised it.
        split: The split that item came from.
        cause: The error (also ``__cause__``).
    """

    def __init__(self, item: Item, split: str, cause: BaseException, why: str = "") -> None:
        self.item = item
        self.split = split
        self.cause = cause
        detail = f"{type(cause).__name__}: {cause}"
        super().__init__(f"run stopped{f' ({why})' if why else ''}: item {item.id!r} of "
                         f"{split}: {detail}")


class PinLost(RuntimeError):
    """The server restarted while a `Runner.pinned` block held its training: holds live in
    the server's memory, so the hold and the version it pinned were lost, and a step may
    have landed (or the restarted server serves its checkpoint under a new version). What
    the block measured is not a figure of one version. ``swarmrl train`` plays a val
    evaluation so cut again, under a fresh hold, and records a test so cut as interrupted
    (test is played once per run)."""


def classify(exc: BaseException, *, timed_out: bool = False) -> FailureKind:
    """The kind of failure `exc` is (see the module docstring). `timed_out`: the rollout's
    own deadline passed (a `TimeoutError` from inside `play()`, an environment server's
    socket timing out, say, is the environment's)."""
    if timed_out:
        return "timeout"
    if isinstance(exc, PolicyError):
        return "policy"
    if isinstance(exc, SwarmError) or _is_http_connection_error(exc):
        return "server"
    return "environment"


def is_fatal(exc: BaseException) -> bool:
    """Whether `exc` will recur on every rollout, so the run should stop at once."""
    if isinstance(exc, TypeError | AttributeError | NameError):
        return True
    if isinstance(exc, NotFoundError):
        return exc.reason not in _LOST_WITH_THE_SERVER
    return isinstance(exc, InvalidArgumentError | PermissionDeniedError | UnauthenticatedError)


def _is_http_connection_error(exc: BaseException) -> bool:
    """An OpenAI / Anthropic client's failure to reach the server (they raise their own
    ``APIConnectionError``, whose module is the library's; not imported here)."""
    return any(cls.__name__ in ("APIConnectionError", "APITimeoutError")
               and cls.__module__.split(".")[0] in ("openai", "anthropic")
               for cls in type(exc).__mro__)
