"""Prometheus metrics of one server, behind a few narrow hooks.

Every Prometheus object lives here; the rest of the server calls one of the hooks
(`request_done`, `call_done`, `episode_finished`, `trainer_step`,
`episodes_dropped_by`, `hold_lapsed`) or registers a `gauges` source that is read at
scrape time.
Each server gets its own `CollectorRegistry`, so two servers in one process (tests)
never mix their counts; the HTTP shim serves it at ``/metrics``.

Names follow the Prometheus conventions: a ``swarmrl_`` prefix, base units in the
name (``_seconds``), ``_total`` on counters. Label values are bounded: doors are
"grpc" / "http" / "internal", models and RPC methods are the server's own, error
codes are gRPC status names.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from swarmrl_server.logs import current_door

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   120.0)
STEP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
STALENESS_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 16, 32)
RECENT_ERRORS = 50
"""Errors kept for `swarmrl top` (the counters keep the totals)."""


@dataclass(frozen=True)
class GaugeSample:
    """One value read at scrape time."""

    name: str
    """Without the ``swarmrl_`` prefix, e.g. "queue_depth"."""
    help: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class ErrorEvent:
    time: float
    door: str
    method: str
    code: str
    message: str


class _LiveGauges(Collector):
    """Gauges whose values the server already holds (open episodes, queues, versions):
    read when scraped instead of being copied on every change."""

    def __init__(self, sources: list[Callable[[], Iterable[GaugeSample]]]) -> None:
        self._sources = sources

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily] = {}
        for source in self._sources:
            for s in source():
                family = families.get(s.name)
                if family is None:
                    family = families[s.name] = GaugeMetricFamily(
                        f"swarmrl_{s.name}", s.help, labels=list(s.labels))
                family.add_metric(list(s.labels.values()), s.value)
        yield from families.values()


class Telemetry:
    """The metrics of one server. Hooks are cheap and never raise into the caller."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "swarmrl_requests", "RPCs and HTTP requests answered, by door, method and status code",
            ["door", "method", "code"], registry=r)
        self.request_seconds = Histogram(
            "swarmrl_request_duration_seconds", "Time to answer an RPC or HTTP request",
            ["door", "method"], buckets=LATENCY_BUCKETS, registry=r)
        self.calls = Counter(
            "swarmrl_calls", "Model calls recorded, by front door, model and finish reason",
            ["door", "model", "finish_reason"], registry=r)
        self.tokens = Counter(
            "swarmrl_tokens", "Tokens of recorded calls, by door, model and kind (prompt/completion)",
            ["door", "model", "kind"], registry=r)
        self.call_seconds = Histogram(
            "swarmrl_call_duration_seconds", "Engine time of one model call, first token to last",
            ["door", "model"], buckets=LATENCY_BUCKETS, registry=r)
        self.first_token_seconds = Histogram(
            "swarmrl_time_to_first_token_seconds", "Time from a call's start to its first tokens",
            ["door", "model"], buckets=LATENCY_BUCKETS, registry=r)
        self.episodes_finished = Counter(
            "swarmrl_episodes_finished", "Episodes that ended or were aborted since start",
            ["state"], registry=r)
        self.trainer_steps = Counter(
            "swarmrl_trainer_steps", "Training steps done", ["model"], registry=r)
        self.trainer_step_seconds = Histogram(
            "swarmrl_trainer_step_duration_seconds", "Wall time of one training step",
            ["model"], buckets=STEP_BUCKETS, registry=r)
        self.weight_sync_seconds = Histogram(
            "swarmrl_weight_sync_duration_seconds",
            "Time to push a step's weights to the engine", ["model"], buckets=STEP_BUCKETS,
            registry=r)
        self.staleness = Histogram(
            "swarmrl_trainer_staleness_versions",
            "Policy versions between an episode's oldest token and the weights it trained",
            ["model"], buckets=STALENESS_BUCKETS, registry=r)
        self.tokens_trained = Counter(
            "swarmrl_trainer_tokens_trained", "Generated tokens trained on", ["model"], registry=r)
        self.episodes_trained = Counter(
            "swarmrl_trainer_episodes", "Episodes trained on", ["model"], registry=r)
        self.episodes_dropped = Counter(
            "swarmrl_trainer_episodes_dropped", "Episodes the trainer dropped, by reason",
            ["model", "reason"], registry=r)
        self.holds_lapsed = Counter(
            "swarmrl_training_holds_lapsed",
            "Holds of training that lapsed (their session ended, or their lease ran out)",
            ["model", "cause"], registry=r)
        self._last_step: dict[str, dict[str, float]] = {}
        self._episode_counts: dict[str, int] = {}
        self._sources: list[Callable[[], Iterable[GaugeSample]]] = [self._trainer_gauges]
        self.registry.register(_LiveGauges(self._sources))
        self.recent_errors: collections.deque[ErrorEvent] = collections.deque(maxlen=RECENT_ERRORS)
        self._totals = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}

    # -- scrape ------------------------------------------------------------------------

    def add_gauges(self, source: Callable[[], Iterable[GaugeSample]]) -> None:
        """Registers a function read at every scrape."""
        self._sources.append(source)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)

    # -- hooks -------------------------------------------------------------------------

    def request_done(self, door: str, method: str, code: str, seconds: float,
                     message: str = "") -> None:
        """An RPC or HTTP request finished with status `code` ("OK", "NOT_FOUND", "404")."""
        self.requests.labels(door, method, code).inc()
        self.request_seconds.labels(door, method).observe(seconds)
        if code not in ("OK", "200", "201", "204"):
            self.recent_errors.append(ErrorEvent(time.time(), door, method, code, message[:300]))

    def call_done(self, model: str, *, prompt_tokens: int, completion_tokens: int,
                  finish_reason: str, first_token_s: float | None, total_s: float) -> None:
        """A model call was recorded (the front door comes from the request's context)."""
        door = current_door()
        self._totals["calls"] += 1
        self._totals["prompt_tokens"] += prompt_tokens
        self._totals["completion_tokens"] += completion_tokens
        self.calls.labels(door, model, finish_reason).inc()
        self.tokens.labels(door, model, "prompt").inc(prompt_tokens)
        self.tokens.labels(door, model, "completion").inc(completion_tokens)
        self.call_seconds.labels(door, model).observe(total_s)
        if first_token_s is not None:
            self.first_token_seconds.labels(door, model).observe(first_token_s)

    def totals(self) -> dict[str, int]:
        """Calls and tokens since start, all doors and models (rates for `swarmrl top`)."""
        return dict(self._totals)

    def set_episode_counts(self, counts: Mapping[str, int]) -> None:
        """Finished episodes in the store at start (the gauge adds those since)."""
        self._episode_counts = dict(counts)

    def episode_finished(self, state: str) -> None:
        self.episodes_finished.labels(state).inc()
        self._episode_counts[state] = self._episode_counts.get(state, 0) + 1

    def episode_counts(self) -> dict[str, int]:
        return dict(self._episode_counts)

    def trainer_step(self, model: str, step: int, values: Mapping[str, float],
                     staleness: Sequence[int]) -> None:
        """A training step's metrics (the names `observe/metrics.py` writes)."""
        self.trainer_steps.labels(model).inc()
        if "time/step_s" in values:
            self.trainer_step_seconds.labels(model).observe(values["time/step_s"])
        if "time/push_s" in values:
            self.weight_sync_seconds.labels(model).observe(values["time/push_s"])
        for s in staleness:
            self.staleness.labels(model).observe(s)
        self.tokens_trained.labels(model).inc(values.get("actor/tokens_trained", 0.0))
        self.episodes_trained.labels(model).inc(values.get("reward/episodes", 0.0))
        self._last_step[model] = {"step": float(step), **values}

    def episodes_dropped_by(self, model: str, counts: Mapping[str, int]) -> None:
        for reason, n in counts.items():
            self.episodes_dropped.labels(model, reason).inc(n)

    def hold_lapsed(self, model: str, cause: str) -> None:
        """A hold of `model`'s training lapsed; `cause` is "session" or "lease"."""
        self.holds_lapsed.labels(model, cause).inc()

    def last_step(self, model: str) -> dict[str, float]:
        return dict(self._last_step.get(model, {}))

    def _trainer_gauges(self) -> Iterator[GaugeSample]:
        # (prometheus name, help, metrics.jsonl key): the latest step's value.
        latest = (
            ("trainer_step", "Latest training step", "step"),
            ("trainer_merge_token_ratio",
             "Tokens as separate calls / tokens as merged timelines, latest step",
             "merge/compression"),
            ("trainer_pack_token_ratio",
             "Tokens as merged timelines / tokens after prefix-tree packing, latest step",
             "merge/pack_token_ratio"),
            ("trainer_reward_mean", "Mean episode reward of the latest step", "reward/mean"),
            ("trainer_loss", "Total loss of the latest step", "loss/total"),
        )
        for model, values in self._last_step.items():
            for name, help_, key in latest:
                if key in values:
                    yield GaugeSample(name, help_, {"model": model}, values[key])
        for state, n in self._episode_counts.items():
            yield GaugeSample("episodes", "Episodes by state", {"state": state}, float(n))


def request_timer() -> Callable[[], float]:
    """Seconds since the call, as a function (for `request_done`)."""
    t0 = time.perf_counter()
    return lambda: time.perf_counter() - t0
