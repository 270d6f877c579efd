"""The study file: an experiment template, its variations, the metric, budgets and rules.

A study file is YAML, validated by the pydantic models below; every error names the
offending key path (``variations.grid.train.lr: ...``), and the study is refused
before anything starts. Variations, the planner's proposals included, are flat maps
of *override keys* to values; an override key is one of

- ``train.KEY``: a trainer setting (``swarmrl serve --train-option KEY=VALUE``),
  checked against the trainer's own option parser;
- ``server.FLAG``: a ``swarmrl serve`` flag (``--FLAG VALUE``; true = the bare flag,
  false or null = left out, a list = the flag repeated), checked against its parser;
- ``client.NAME.ARG``: an argument of client NAME (``--ARG VALUE``, same rules).

Seeds are their own axis: every variation runs once per seed, the seed going to
``--train-option seed=S`` and to the ``{seed}`` placeholder of client commands.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Scalar = str | int | float | bool | None
Value = Scalar | list[Scalar]
NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class StudyError(ValueError):
    """The study file (or a proposal) is invalid; the message starts with the key path."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerTemplate(_Strict):
    command: list[str] = Field(default=["{python}", "-m", "swarmrl_server.cli"], min_length=1)
    """The server's command before its flags (default: ``swarmrl serve``)."""
    flags: dict[str, Value] = {}
    """``swarmrl serve`` flags without the dashes; --port, --http-port and --data-dir are
    the study's own (each run gets free ports and its data dir)."""
    train_options: dict[str, Scalar] = {}
    """``--train-option`` KEY: VALUE pairs."""
    env: dict[str, str] = {}


class ClientTemplate(_Strict):
    name: Annotated[str, Field(pattern=NAME)]
    command: list[str] = Field(min_length=1)
    """The client's command; placeholders: {python} {target} {http_url} {run_dir}
    {data_dir} {run_id} {seed} {replica}."""
    args: dict[str, Value] = {}
    """Appended as ``--ARG VALUE``; variations override them as client.NAME.ARG."""
    replicas: int = Field(default=1, ge=1)
    env: dict[str, str] = {}


class Variations(_Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    grid: dict[str, list[Value]] = {}
    """Every combination of these values (an empty grid adds nothing)."""
    items: list[dict[str, Value]] = Field(default=[], alias="list")
    """Each map is one variation (after the grid's)."""


class Metric(_Strict):
    name: str = "reward/mean"
    """A key of the trainer's metrics.jsonl."""
    direction: Literal["max", "min"] = "max"
    final_window: int = Field(default=1, ge=1)
    """A run's final value: the mean over its last this-many steps that report the metric
    (noisy per-step rewards rank better over a window)."""
    rank_by: str | None = None
    """Rank runs by this dotted key of the `results` file instead (a validation figure,
    e.g. ``selected.val_figures.success_rate`` of a ``swarmrl train`` card); a key under
    ``test`` is refused: studies choose on val, and test is for the report alone."""

    @model_validator(mode="after")
    def _never_by_test(self) -> Metric:
        if self.rank_by is not None and self.rank_by.split(".")[0] == "test":
            raise ValueError(f"rank_by {self.rank_by!r} reads a test figure: studies rank "
                             "their runs by val, never by test")
        return self


class Budget(_Strict):
    wall_s: float | None = Field(default=None, gt=0)
    """Seconds a run may be supervised (summed over `study run` invocations)."""
    steps: int | None = Field(default=None, gt=0)
    """Training steps (the last step in metrics.jsonl)."""
    episodes: int | None = Field(default=None, gt=0)
    """Ended episodes (the server's GetStatus)."""


class EntropyCollapse(_Strict):
    below: float
    """Stop when actor/entropy stays below this ..."""
    steps: int = Field(default=3, ge=1)
    """... for this many consecutive steps."""


class RewardFloor(_Strict):
    value: float
    """Stop when the metric is below this ..."""
    after_steps: int = Field(ge=0)
    """... at or after this step ..."""
    window: int = Field(default=1, ge=1)
    """... averaged over the last `window` steps."""
    metric: str = "reward/mean"


class StopRules(_Strict):
    nan_loss: bool = True
    """Stop at the first step whose loss/total is NaN or infinite."""
    entropy_collapse: EntropyCollapse | None = None
    reward_floor: RewardFloor | None = None


class Restarts(_Strict):
    server: int = Field(default=3, ge=0)
    """Server restarts a run may use (on its data dir: it resumes from its checkpoint)."""
    client: int = Field(default=5, ge=0)
    """Client restarts a run may use (all clients together)."""
    backoff_s: float = Field(default=1.0, ge=0)
    """First wait before a server start is retried; doubles on each failure ..."""
    backoff_max_s: float = Field(default=30.0, ge=0)
    """... up to this."""
    start_timeout_s: float = Field(default=300.0, gt=0)
    """How long a server may take to answer its health check after a start."""
    unhealthy_s: float = Field(default=60.0, gt=0)
    """A live server that fails its health check this long is killed and restarted."""


class Planner(_Strict):
    function: str | None = None
    """``module:function`` called with (results, study) and returning proposals."""
    base_url: str | None = None
    """An OpenAI-compatible endpoint (.../v1) asked for proposals ..."""
    model: str | None = None
    """... with this model."""
    api_key_env: str | None = None
    """Environment variable holding its API key (default: none needed)."""
    stages: int = Field(default=1, ge=1)
    """How many times the planner is asked (each after a stage has finished)."""
    max_proposals: int = Field(default=4, ge=1)
    """Proposals accepted per stage at most (the rest are refused as over the limit)."""
    instructions: str = ""
    """Extra text for the model's prompt (what to explore)."""

    @model_validator(mode="after")
    def _one_kind(self) -> Planner:
        if (self.function is None) == (self.base_url is None):
            raise ValueError("give either function or base_url (with model)")
        if self.base_url is not None and not self.model:
            raise ValueError("base_url needs model")
        return self


class Results(_Strict):
    """Report columns a run's clients write: values read from a JSON file in the run's
    directory (e.g. a held-out evaluation the metrics do not hold)."""

    file: str
    """The JSON file, relative to the run's directory (e.g. ``rg/summary.json``)."""
    columns: dict[str, str] = Field(min_length=1)
    """Column title -> dotted key in the file (e.g. ``held-out after: after.rate``)."""


class Study(_Strict):
    name: Annotated[str, Field(pattern=NAME)]
    server: ServerTemplate = ServerTemplate()
    clients: list[ClientTemplate] = Field(min_length=1)
    variations: Variations = Variations()
    seeds: list[int] = Field(default=[0], min_length=1)
    metric: Metric = Metric()
    budget: Budget = Budget()
    concurrency: int = Field(default=1, ge=1)
    stop_rules: StopRules = StopRules()
    restarts: Restarts = Restarts()
    planner: Planner | None = None
    results: Results | None = None
    workdir: str | None = None
    """Where runs, state and reports go (relative to the study file; default:
    ``<study file stem>.study`` beside it)."""

    @model_validator(mode="after")
    def _unique_clients(self) -> Study:
        names = [c.name for c in self.clients]
        if len(set(names)) != len(names):
            raise ValueError(f"client names must be unique, got {names}")
        if self.metric.rank_by is not None and self.results is None:
            raise ValueError("metric.rank_by reads the results file: add `results`")
        return self


@dataclass(frozen=True)
class RunSpec:
    """One experiment: the template with these overrides, at this seed."""

    run_id: str
    stage: int
    overrides: dict[str, Value] = field(default_factory=dict)
    seed: int = 0
    origin: str = "study"
    """Where it came from: "study" (the file's variations) or "planner"."""

    def label(self) -> str:
        """The config diff against the base, as one line."""
        parts = [f"{k}={_show(v)}" for k, v in self.overrides.items()]
        return " ".join(parts + [f"seed={self.seed}"])

    def variation_key(self) -> str:
        """Same for runs that differ only by seed (their spread is reported)."""
        return " ".join(f"{k}={_show(v)}" for k, v in self.overrides.items()) or "(base)"


def _show(value: Value) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def key_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def expand(study: Study, stage: int = 0, start: int = 0) -> list[RunSpec]:
    """The study's variations x seeds, as runs of stage `stage` numbered from `start`."""
    grid = study.variations.grid
    variations: list[dict[str, Value]] = []
    if grid:
        keys = list(grid)
        variations += [dict(zip(keys, combo)) for combo in itertools.product(*grid.values())]
    variations += [dict(item) for item in study.variations.items]
    return runs_for(study, variations or [{}], stage=stage, start=start, origin="study")


def runs_for(study: Study, variations: list[dict[str, Value]], *, stage: int, start: int,
             origin: str) -> list[RunSpec]:
    out: list[RunSpec] = []
    for variation in variations:
        for seed in study.seeds:
            out.append(RunSpec(f"s{stage}-r{start + len(out):02d}", stage, variation, seed,
                               origin))
    return out


def workdir_for(study: Study, study_path: Path) -> Path:
    if study.workdir:
        return (study_path.parent / study.workdir).resolve()
    return study_path.parent.resolve() / f"{study_path.stem}.study"

