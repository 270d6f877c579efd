"""The SDK's one retry policy, applied to every call (built on tenacity).

Why retries are bounded by time and not by attempts: with exponential backoff the
number of attempts says little about how long a caller is blocked, and what a user
wants to say is "wait this long for a restarting server, then give up".

The clock starts when the server first looks unhealthy (a call failed with
UNAVAILABLE, or a wait for the channel to connect ran out), not when the call
began: a stream that ran fine for an hour and then lost its server gets the full
budget to reconnect.

Only UNAVAILABLE is retried, and only for calls that are safe to repeat: the
idempotent ones, and the mutating ones that carry a client-made ``request_id``
(the server applies a repeated request_id once and answers with the first answer).
gRPC's own retry machinery is switched off on our channels, so this is the only
retry layer in Python.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, wait_random_exponential

from swarmrl._errors import SwarmError, UnavailableError

__all__ = ["RetryPolicy"]

_log = structlog.get_logger("swarmrl")

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How the SDK retries calls that failed with UNAVAILABLE.

    Waits are drawn with full jitter: before retry ``n`` the SDK sleeps a uniform
    random time in ``[0, min(maximum, initial * multiplier ** (n - 1))]``, and never
    less than the delay the server asked for (google.rpc.RetryInfo). Pass
    ``retry=None`` in `ClientConfig` to turn retries off.
    """

    initial: float = 0.1
    """Upper bound of the first wait, in seconds."""
    multiplier: float = 2.0
    """Factor by which the bound grows after each failed attempt."""
    maximum: float = 5.0
    """Largest bound of a single wait, in seconds (a server's RetryInfo may ask for more)."""
    timeout: float = 120.0
    """Seconds the server may stay unhealthy (unreachable or answering UNAVAILABLE) before
    the SDK gives up and raises the last error. The default waits out a server restart."""

    def __post_init__(self) -> None:
        if not (self.initial > 0 and self.maximum > 0 and self.timeout > 0):
            raise ValueError("RetryPolicy: initial, maximum and timeout must be positive")
        if self.multiplier < 1:
            raise ValueError("RetryPolicy: multiplier must be at least 1")


class Budget:
    """The time one logical call has left to get through.

    The clock starts at the first failure, or at the start of a wait for the channel
    that ran out; until then the whole timeout is left. Time spent healthy (a stream
    that read for an hour, say) never counts.
    """

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._unhealthy_since: float | None = None

    def unhealthy_since(self, when: float) -> None:
        """Records that the server has been unhealthy since `when` (a monotonic time)."""
        if self._unhealthy_since is None or when < self._unhealthy_since:
            self._unhealthy_since = when

    def remaining(self) -> float:
        """Seconds left."""
        if self._unhealthy_since is None:
            return self._timeout
        return max(0.0, self._unhealthy_since + self._timeout - time.monotonic())


def is_retryable(err: BaseException) -> bool:
    """Whether a failure may be retried at all (the call must also be safe to repeat)."""
    return isinstance(err, UnavailableError)


async def call_with_retry(
    attempt: Callable[[Budget | None], Awaitable[T]],
    *,
    policy: RetryPolicy | None,
    method: str,
    retryable: bool,
) -> T:
    """Runs ``attempt`` until it succeeds, fails for good, or the policy's time is spent.

    Args:
        attempt: One try of the call. It gets the budget (None when retries are off)
            so that it can bound how long it waits for the channel to become ready.
        policy: The retry policy; None runs a single attempt.
        method: RPC name, for the logs.
        retryable: Whether the call is safe to repeat (idempotent, or carries a
            request_id). When False a single attempt runs.

    Raises:
        SwarmError: The last failure.
    """
    if policy is None or not retryable:
        return await attempt(None)
    budget = Budget(policy.timeout)
    jitter = wait_random_exponential(
        multiplier=policy.initial, exp_base=policy.multiplier, max=policy.maximum
    )

    def wait(state: RetryCallState) -> float:
        delay = jitter(state)
        err = state.outcome.exception() if state.outcome is not None else None
        if isinstance(err, SwarmError) and err.retry_delay is not None:
            delay = max(delay, err.retry_delay)  # the server's hint is a lower bound
        return delay

    def stop(state: RetryCallState) -> bool:
        budget.unhealthy_since(time.monotonic())
        left = budget.remaining()
        return left <= 0 or state.upcoming_sleep >= left

    def log_retry(state: RetryCallState) -> None:
        err = state.outcome.exception() if state.outcome is not None else None
        _log.warning(
            "retrying",
            method=method,
            attempt=state.attempt_number,
            delay=round(state.upcoming_sleep, 3),
            code=err.code.name if isinstance(err, SwarmError) else None,
            reason=err.reason if isinstance(err, SwarmError) else None,
        )

    retrying = AsyncRetrying(
        retry=retry_if_exception(is_retryable),
        wait=wait,
        stop=stop,
        before_sleep=log_retry,
        reraise=True,
    )
    async for try_ in retrying:
        with try_:
            return await attempt(budget)
    raise AssertionError("unreachable: tenacity either returns or reraises")  # pragma: no cover


async def retry_once_after(
    call: Callable[[], Awaitable[T]],
    *,
    should_recover: Callable[[BaseException], bool],
    recover: Callable[[], Awaitable[None]],
) -> T:
    """Runs ``call``; if it fails in a recoverable way, runs ``recover`` and tries once more.

    Used for state the server can lose (a session, after a restart with a fresh
    store): the SDK rebuilds it and repeats the call a single time.
    """
    try:
        return await call()
    except SwarmError as err:
        if not should_recover(err):
            raise
    await recover()
    return await call()
