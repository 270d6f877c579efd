"""The planner hook: after a stage, propose the next variations from the results so far.

A planner is either a Python function (``planner.function: module:function``, called
with the results and the study as plain data, returning proposals) or any
OpenAI-compatible model (``planner.base_url`` + ``planner.model``: an external one,
or a swarm server's shim at an episode's base URL), asked through the official ``openai`` client to
reply with JSON. A proposal is ``{"overrides": {KEY: VALUE, ...}, "why": "..."}``
(or the overrides map alone). Each one is validated exactly as the study file's
variations are (`validate.check_overrides`: the server's and the trainer's own
parsers); accepted ones run (once per seed) as the next stage, and every proposal,
accepted or refused with its reason, is kept in ``study.json`` and the report.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter, ValidationError

from swarmrl_server.study.schema import (
    RunSpec,
    Study,
    StudyError,
    Value,
    runs_for,
)
from swarmrl_server.study.state import Proposal, RunRecord, StudyRecord
from swarmrl_server.study.validate import check_overrides

PlanFunction = Callable[[list[dict[str, Any]], dict[str, Any]], Any]
_OVERRIDES = TypeAdapter(dict[str, Value])

SYSTEM_PROMPT = """\
You plan reinforcement-learning experiments. You are shown a study: the metric to \
optimise and its direction, the base experiment, and every run so far with its \
overrides and results. Propose the next variations to try. An override key is \
train.KEY (a trainer option), server.FLAG (a `swarmrl serve` flag) or \
client.NAME.ARG (an argument of client NAME). Reply with JSON only: \
{"proposals": [{"overrides": {"train.lr": 0.0001}, "why": "..."}]}"""


def results(runs: list[RunRecord]) -> list[dict[str, Any]]:
    """What a planner is shown of each run."""
    return [{"run_id": r.run_id, "stage": r.stage, "overrides": r.overrides, "seed": r.seed,
             "state": r.state, "reason": r.reason, "step": r.step, "final_metric": r.metric,
             "best_metric": r.best, "best_step": r.best_step, "restarts": len(r.restarts)}
            for r in runs]


def study_brief(study: Study) -> dict[str, Any]:
    return {"name": study.name, "metric": study.metric.model_dump(),
            "server": study.server.model_dump(),
            "clients": [c.model_dump(include={"name", "args"}) for c in study.clients],
            "seeds": study.seeds, "budget": study.budget.model_dump()}


def load_function(spec: str) -> PlanFunction:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise StudyError(f"planner.function: expected module:function, got {spec!r}")
    if os.getcwd() not in sys.path:  # as `python -m` would: modules of the working dir
        sys.path.insert(0, os.getcwd())
    try:
        fn: PlanFunction = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise StudyError(f"planner.function: cannot load {spec!r}: {exc}") from None
    return fn


def ask_model(study: Study, shown: list[dict[str, Any]]) -> Any:
    """The model's proposals (parsed JSON), through the official openai client."""
    from openai import OpenAI

    planner = study.planner
    assert planner is not None and planner.base_url and planner.model
    key = os.environ.get(planner.api_key_env, "") if planner.api_key_env else ""
    client = OpenAI(base_url=planner.base_url, api_key=key or "unused", max_retries=2)
    user = {"study": study_brief(study), "runs": shown,
            "max_proposals": planner.max_proposals, "instructions": planner.instructions}
    reply = client.chat.completions.create(
        model=planner.model, temperature=0.0,
        messages=[{"role": "system", "content": SYSTEM_PROMPT},
                  {"role": "user", "content": json.dumps(user, indent=1)}])
    text = reply.choices[0].message.content or ""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise StudyError(f"the planner's reply holds no JSON object: {text[:200]!r}")
    try:
        return json.loads(text[start:end + 1])
    except json.JSONDecodeError as exc:
        raise StudyError(f"the planner's reply is not valid JSON ({exc}): {text[:200]!r}"
                         ) from None


def _items(raw: Any) -> list[Any]:
    if isinstance(raw, dict) and "proposals" in raw:
        raw = raw["proposals"]
    if not isinstance(raw, list):
        raise StudyError(f"expected a list of proposals, got {type(raw).__name__}")
    return raw


def review(study: Study, raw: Any, stage: int, done: list[RunRecord]
           ) -> tuple[list[Proposal], list[dict[str, Value]]]:
    """Each proposal accepted or refused (with why), and the accepted overrides."""
    planner = study.planner
    assert planner is not None
    seen = [dict(r.overrides) for r in done]
    log: list[Proposal] = []
    accepted: list[dict[str, Value]] = []
    for i, item in enumerate(_items(raw)):
        where = f"proposal[{i}]"
        why = str(item.get("why", "")) if isinstance(item, dict) else ""
        body = item.get("overrides", item) if isinstance(item, dict) else item
        if isinstance(body, dict) and "why" in body and "overrides" not in item:
            body = {k: v for k, v in body.items() if k != "why"}
        try:
            overrides = _OVERRIDES.validate_python(body)
        except ValidationError as exc:
            reason = "; ".join(f"{where}.{'.'.join(map(str, e['loc']))}: {e['msg']}"
                               for e in exc.errors())
            log.append(Proposal(stage=stage, raw=json.dumps(item, default=str), why=why,
                                accepted=False, reason=reason))
            continue
        reason = ""
        if len(accepted) >= planner.max_proposals:
            reason = f"over planner.max_proposals ({planner.max_proposals})"
        elif overrides in seen:
            reason = "already run"
        else:
            try:
                check_overrides(study, overrides, where)
            except StudyError as exc:
                reason = str(exc)
        if not reason:
            accepted.append(overrides)
            seen.append(overrides)
        log.append(Proposal(stage=stage, overrides=overrides, why=why,
                            accepted=not reason, reason=reason))
    return log, accepted


def make_planner(study: Study
                 ) -> Callable[[StudyRecord, list[RunRecord], int], list[RunSpec]]:
    """The runner's planner callback: asks, reviews, logs, returns the next stage's runs."""
    planner = study.planner
    assert planner is not None
    function = load_function(planner.function) if planner.function else None

    def plan(record: StudyRecord, runs: list[RunRecord], stage: int) -> list[RunSpec]:
        try:
            if function is not None:
                raw = function(results(runs), study.model_dump(by_alias=True))
            else:
                raw = ask_model(study, results(runs))
            log, accepted = review(study, raw, stage, runs)
        except Exception as exc:  # the planner is the user's code or a remote model
            record.planner_errors.append(f"stage {stage}: {type(exc).__name__}: {exc}")
            return []
        specs = runs_for(study, accepted, stage=stage,
                         start=sum(len(s) for s in record.stages), origin="planner")
        for proposal in log:
            if proposal.accepted:
                ids = [s.run_id for s in specs if s.overrides == proposal.overrides]
                proposal.reason = f"runs {', '.join(ids)}"
        record.proposals += log
        return specs

    return plan
