"""The study file's schema, its expansion into runs, stop rules, budgets and the planner's
review: pure functions, no servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarmrl_server.study import watch
from swarmrl_server.study.commands import Ports, client_processes, server_process
from swarmrl_server.study.planner import review
from swarmrl_server.study.schema import (
    Budget,
    Metric,
    StopRules,
    StudyError,
    expand,
)
from swarmrl_server.study.state import RunRecord, StudyState, write_atomic
from swarmrl_server.study.validate import load_study, parse_study

BASE: dict[str, Any] = {
    "name": "unit",
    "server": {"flags": {"model": "tiny", "train": True},
               "train_options": {"batch_size": 4, "lr": 1e-4}},
    "clients": [{"name": "agent", "command": ["{python}", "agent.py", "{target}"],
                 "args": {"bias": 0.0}}],
}


def study(**changes: Any) -> Any:
    return parse_study({**BASE, **changes})


@pytest.mark.parametrize(("changes", "path", "words"), [
    ({"concurrency": 0}, "concurrency", "greater than or equal to 1"),
    ({"budget": {"steps": "many"}}, "budget.steps", "integer"),
    ({"stop_rules": {"reward_floor": {"value": 0.1}}}, "stop_rules.reward_floor.after_steps",
     "Field required"),
    ({"clients": [{"name": "a", "comand": ["x"]}]}, "clients[0].comand", "Extra inputs"),
    ({"variations": {"grid": {"train.lr": [1e-4, "fast"]}}}, "variations.grid.train.lr[1]",
     "lr"),
    ({"variations": {"list": [{"train.learning_rate": 0.1}]}},
     "variations.list[0]", "unknown train option 'learning_rate'"),
    ({"variations": {"list": [{"server.max-speed": 3}]}}, "variations.list[0]",
     "unknown server flag --max-speed"),
    ({"variations": {"list": [{"server.port": 3}]}}, "variations.list[0]",
     "--port is set by the study"),
    ({"variations": {"list": [{"client.critic.bias": 1}]}},
     "variations.list[0].client.critic.bias", "NAME one of ['agent']"),
    ({"variations": {"list": [{"lr": 1}]}}, "variations.list[0].lr", "unknown override key"),
    ({"clients": [{"name": "a", "command": ["{pyton}"]}]}, "clients[0].command",
     "unknown placeholder 'pyton'"),
    ({"planner": {"base_url": "http://x/v1"}}, "planner", "base_url needs model"),
])
def test_errors_name_the_key(changes: dict[str, Any], path: str, words: str) -> None:
    with pytest.raises(StudyError) as err:
        study(**changes)
    assert f"{path}:" in str(err.value) or f"{path}." in str(err.value), str(err.value)
    assert words in str(err.value)


def test_yaml_file_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, "seeds": "one"}))
    with pytest.raises(StudyError, match=r"s\.yaml: seeds: Input should be a valid list"):
        load_study(path)
    path.write_text("name: [unclosed")
    with pytest.raises(StudyError, match="cannot read the study"):
        load_study(path)


def test_grid_list_and_seeds_expand_into_runs(tmp_path: Path) -> None:
    s = study(seeds=[1, 2], variations={
        "grid": {"train.lr": [1e-4, 1e-3], "client.agent.bias": [0.0, 1.0]},
        "list": [{"server.default-max-tokens": 8}]})
    runs = expand(s)
    assert len(runs) == (4 + 1) * 2 and len({r.run_id for r in runs}) == 10
    assert runs[0].overrides == {"train.lr": 1e-4, "client.agent.bias": 0.0}
    assert [r.seed for r in runs[:2]] == [1, 2]
    assert runs[0].variation_key() == runs[1].variation_key() != runs[2].variation_key()
    last = runs[-1]
    server = server_process(s, last, tmp_path / "r", Ports(5000, 5001)).argv
    assert server[-8:] == ["--default-max-tokens", "8", "--train-option", "batch_size=4",
                           "--train-option", "lr=0.0001", "--train-option", "seed=2"]
    assert server[server.index("--port") + 1] == "5000"
    assert server[server.index("--data-dir") + 1] == str(tmp_path / "r" / "data")
    assert "--train" in server and "seed=2" in server
    client = client_processes(s, runs[2], tmp_path / "r", Ports(5000, 5001))[0].argv
    assert client[-3:] == ["127.0.0.1:5000", "--bias", "1.0"], client


def rows(*values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"step": i + 1, **v} for i, v in enumerate(values)]


def test_stop_rules() -> None:
    ok = rows({"loss/total": 0.1, "actor/entropy": 2.0, "reward/mean": 0.5})
    rules = StopRules.model_validate({
        "entropy_collapse": {"below": 0.1, "steps": 2},
        "reward_floor": {"value": 0.2, "after_steps": 3, "window": 2}})
    assert watch.stop_reason(ok, rules) is None
    nan = ok + rows({}, {"loss/total": None})[1:]
    assert "nan_loss" in (watch.stop_reason(nan, rules) or "")
    assert watch.stop_reason(nan, StopRules(nan_loss=False)) is None
    collapse = rows(*[{"actor/entropy": e} for e in (2.0, 0.05, 0.01)])
    assert "entropy_collapse" in (watch.stop_reason(collapse, rules) or "")
    assert watch.stop_reason(collapse[:2], rules) is None  # one low step is not a collapse
    low = rows(*[{"reward/mean": r} for r in (0.1, 0.1, 0.1)])
    assert "reward_floor" in (watch.stop_reason(low, rules) or "")
    assert watch.stop_reason(low[:2], rules) is None  # before after_steps
    recovering = rows(*[{"reward/mean": r} for r in (0.0, 0.1, 0.5)])
    assert watch.stop_reason(recovering, rules) is None  # mean of the last 2 is 0.3


def test_budgets_and_progress() -> None:
    budget = Budget(steps=5, episodes=100, wall_s=60)
    assert watch.budget_reason(budget, step=4, episodes=99, wall_s=59) is None
    assert "steps" in (watch.budget_reason(budget, step=5, episodes=0, wall_s=0) or "")
    assert "episodes" in (watch.budget_reason(budget, step=0, episodes=100, wall_s=0) or "")
    assert "wall" in (watch.budget_reason(budget, step=0, episodes=0, wall_s=61) or "")
    data = rows({"reward/mean": 0.2}, {"reward/mean": 0.9}, {"reward/mean": None}, {})
    p = watch.progress(data, Metric())
    assert (p.step, p.metric, p.best, p.best_step) == (4, 0.9, 0.9, 2)
    p = watch.progress(data, Metric(direction="min", final_window=5))
    assert (p.metric, p.best, p.best_step) == (0.55, 0.2, 1)


def test_metrics_tail_waits_for_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    tail = watch.MetricsTail(path)
    assert tail.poll() == []
    path.write_text('{"step": 1}\n{"step": ')
    assert tail.poll() == [{"step": 1}]
    with open(path, "a") as f:
        f.write('2}\n')
    assert tail.poll() == [{"step": 2}] and len(tail.rows) == 2


def test_planner_review_accepts_valid_refuses_invalid() -> None:
    s = study(planner={"function": "x:y", "max_proposals": 2})
    done = [RunRecord(run_id="s0-r00", stage=0, overrides={"train.lr": 1e-4})]
    raw = {"proposals": [
        {"overrides": {"train.lr": 3e-4}, "why": "faster"},
        {"overrides": {"train.lr": 1e-4}, "why": "again"},
        {"overrides": {"train.lr": "fast"}},
        {"overrides": {"server.turbo": True}},
        {"overrides": ["not", "a", "map"]},
        {"client.agent.bias": 0.5, "why": "bare map"},
        {"overrides": {"client.agent.bias": 0.7}},
    ]}
    log, accepted = review(s, raw, 1, done)
    assert accepted == [{"train.lr": 3e-4}, {"client.agent.bias": 0.5}]
    reasons = [p.reason for p in log]
    assert [p.accepted for p in log] == [True, False, False, False, False, True, False]
    assert reasons[1] == "already run"
    assert "lr" in reasons[2] and "--turbo" in reasons[3]
    assert reasons[4].startswith("proposal[4]") and "max_proposals" in reasons[6]
    assert log[0].why == "faster" and log[5].why == "bare map"
    with pytest.raises(StudyError, match="list of proposals"):
        review(s, {"nope": 1}, 1, done)


def test_state_files_round_trip_and_write_atomically(tmp_path: Path) -> None:
    state = StudyState(tmp_path)
    spec = expand(study())[0]
    state.save_run(RunRecord.new(spec))
    loaded = state.load_run(spec.run_id)
    assert loaded is not None and loaded.spec() == spec and not loaded.finished
    write_atomic(tmp_path / "f.json", "new")
    assert (tmp_path / "f.json").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_run_that_cannot_start_fails_and_a_finished_run_never_starts(tmp_path: Path) -> None:
    from swarmrl_server.study.supervisor import RunSupervisor

    s = study(server={"command": [str(tmp_path / "no-such-server")],
                      "flags": {"model": "tiny"}})
    state = StudyState(tmp_path)
    spec = expand(s)[0]
    record = RunSupervisor(s, state, spec, cwd=tmp_path).run()
    assert record.state == "failed" and "cannot start a process" in record.reason
    assert record.processes == {} and state.load_run(spec.run_id) == record
    again = RunSupervisor(s, state, spec, cwd=tmp_path).run()
    assert again == record  # finished: nothing started, nothing written


def test_results_columns_read_each_runs_json(tmp_path: Path) -> None:
    from swarmrl_server.study.report import results

    s = study(results={"file": "client/summary.json",
                       "columns": {"after": "after.rate", "gain": "gain", "n": "after.n"}})
    (tmp_path / "client").mkdir()
    (tmp_path / "client" / "summary.json").write_text(
        '{"after": {"rate": 0.31666, "n": 180}, "gain": 0.1889}')
    assert results(s, tmp_path) == ["0.3167", "0.1889", "180"]
    assert results(s, tmp_path / "missing") == ["-", "-", "-"]  # a run still running
    assert results(study(), tmp_path) == []
    with pytest.raises(StudyError, match="results.columns"):
        study(results={"file": "x.json", "columns": {}})


def test_runs_rank_by_a_val_figure_never_by_a_test_one(tmp_path: Path) -> None:
    from swarmrl_server.study.report import rank, ranked_value

    results = {"file": "card.json", "columns": {"val": "selected.val_figures.success_rate"}}
    with pytest.raises(StudyError, match="never by test"):
        study(results=results, metric={"rank_by": "test.figures.success_rate"})
    with pytest.raises(StudyError, match="add `results`"):
        study(metric={"rank_by": "selected.val_figures.success_rate"})
    s = study(results=results, metric={"rank_by": "evals.-1.figures.success_rate"},
              variations={"grid": {"train.lr": [1e-4, 1e-3]}})
    specs = expand(s)
    runs = [RunRecord.new(spec) for spec in specs]
    for run, (val, test) in zip(runs, [(0.2, 0.9), (0.4, 0.1)]):
        folder = tmp_path / run.run_id
        folder.mkdir()
        (folder / "card.json").write_text(json.dumps(
            {"evals": [{"figures": {"success_rate": 0.0}}, {"figures": {"success_rate": val}}],
             "test": {"figures": {"success_rate": test}}}))
        run.metric = ranked_value(s, folder)
    assert [r.metric for r in runs] == [0.2, 0.4]
    # The run with the better val ranks first, whatever its test figure.
    assert rank(s, runs)[0].run_ids == [runs[1].run_id]
