"""The defaults study's plan and files (results/studies/defaults-plan.md), checked before
any of its runs: every study file it names validates as `swarmrl study run` validates it,
each run's client is a `swarmrl train` command line that never plays test, and the fresh
test seeds the plan records were used by no recorded run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarmrl_server.study.commands import Ports, client_processes
from swarmrl_server.study.schema import expand
from swarmrl_server.study.validate import load_study
from tests.helpers import REPO

PLAN = REPO / "results" / "studies" / "defaults-plan.md"
STUDIES = {"higher_lower": "examples.higher_lower.env:HigherLower",
           "reasoning_gym": "examples.reasoning_gym.env:ReasoningGym",
           "forced_tools": "examples.forced_tools.env:ForcedTools",
           "textworld": "examples.textworld.env:TextWorld"}


def _fresh_seeds() -> dict[str, dict[str, int]]:
    block = re.search(r"```yaml fresh-test-seeds\n(.*?)```", PLAN.read_text(), re.S)
    assert block, "the plan records its fresh test seeds in a `yaml fresh-test-seeds` block"
    seeds: dict[str, dict[str, int]] = yaml.safe_load(block.group(1))
    return seeds


@pytest.mark.parametrize("name", sorted(STUDIES))
def test_each_study_file_validates_and_its_runs_choose_on_val(name: str) -> None:
    from swarmrl.envs._cli import _parser

    path = REPO / "examples" / "studies" / f"defaults_{name}.yaml"
    assert f"examples/studies/defaults_{name}.yaml" in PLAN.read_text()  # the plan names it
    study = load_study(path, deep=True)  # schema, then every variation through the parsers
    runs = expand(study)
    assert len(runs) == 8 and {r.seed for r in runs} == {0, 1}  # 4 recipes x 2 seeds
    assert study.concurrency == 1 and study.metric.rank_by is not None
    assert not study.metric.rank_by.startswith("test")
    recipes = [r.overrides for r in runs[::2]]
    assert recipes[0] == {"train.lora_rank": 0, "train.lr": 1e-5,  # R0, today's defaults,
                          "train.batch_rule": "episodes", "train.batch_size": 32}  # pinned
    for spec in runs:
        (client,) = client_processes(study, spec, Path("run"), Ports(1, 2))
        assert client.argv[1:5] == ["-m", "swarmrl", "train", STUDIES[name]]
        args = _parser("train").parse_args(client.argv[4:])  # swarmrl train's own parser
        assert args.test is False and args.minutes == 15 and args.eval_every == 4
        assert args.target == "127.0.0.1:1" and args.group_size == 8


def _used_ranges() -> dict[str, list[tuple[int, int]]]:
    """Generator seed ranges every recorded run drew held-out items from, by environment."""
    used: dict[str, list[tuple[int, int]]] = {"rg": [], "tw": [], "ft": []}
    records = sorted((REPO / "results").rglob("*.json"))
    for path in records:
        record: dict[str, Any] = json.loads(path.read_text())
        describe = (record.get("env") or {}).get("describe") or {}
        sizes = describe.get("sizes") or {}
        if "test_seed" in describe:  # reasoning-gym: problem i of seed s is Random(s + i)
            used["rg"] += [(describe["test_seed"], describe["test_seed"] + sizes["test"]),
                           (describe["val_seed"], describe["val_seed"] + 4 * sizes["val"])]
        if "test_seed_base" in describe:
            counts = describe["counts"]
            used["tw"] += [(describe["test_seed_base"] + 1,
                            describe["test_seed_base"] + counts["test"] + 1),
                           (describe["val_seed_base"] + 1,
                            describe["val_seed_base"] + counts["val"] + 1),
                           (1, counts["train"] + 1)]
        if "eval_seed_base" in record:  # the earlier TextWorld records
            base = record["eval_seed_base"]
            used["tw"].append((base + 1, base + record["eval_games"] + 1))
        if isinstance(describe.get("seeds"), list):  # forced tools: test, val, train
            used["ft"] += [(s, s + 1) for s in describe["seeds"]]
    assert all(used.values()), "every environment has recorded runs to check against"
    return used


def test_the_fresh_test_seeds_were_never_used() -> None:
    fresh, used = _fresh_seeds(), _used_ranges()

    def clear(lo: int, hi: int, ranges: list[tuple[int, int]]) -> bool:
        return all(hi <= a or b <= lo for a, b in ranges)

    rg = fresh["reasoning_gym"]
    assert clear(rg["test_seed"], rg["test_seed"] + rg["test_size"], used["rg"])
    # The training streams of seeds 0-2 (and the proof's 10-12) start at 1 + 10^7 * seed.
    assert all(rg["test_seed"] + rg["test_size"] <= 1 + 10**7 * s or
               rg["test_seed"] >= 1 + 10**7 * s + 10**6 for s in (0, 1, 2, 10, 11, 12))
    tw = fresh["textworld"]
    assert clear(tw["test_seed_base"] + 1, tw["test_seed_base"] + tw["test_games"] + 1,
                 used["tw"])
    assert clear(fresh["forced_tools"]["test_seed"], fresh["forced_tools"]["test_seed"] + 1,
                 used["ft"])
    from examples.higher_lower import env as higher_lower

    hl = fresh["higher_lower"]
    assert (higher_lower.TEST_SEED, higher_lower.VAL_SEED, higher_lower.TRAIN_SEED) == (
        hl["test_seed"], hl["val_seed"], hl["train_seed"])


def test_the_ranking_rule_is_the_plans() -> None:
    from examples.studies.defaults_rank import RunFigure, beats_reference, cells, pruned, ranking

    def runs(*successes: float, reward: float = 0.5, before: float = 0.1) -> list[RunFigure]:
        return [RunFigure(s, reward, before) for s in successes]

    figures = {("R0", "higher-lower"): runs(0.10, 0.12), ("R0", "reasoning-gym"): runs(0.15, 0.15),
               ("R1", "higher-lower"): runs(0.40, 0.30), ("R1", "reasoning-gym"): runs(0.20, 0.22),
               ("R2", "higher-lower"): runs(0.05, 0.05), ("R2", "reasoning-gym"): runs(0.10, 0.10),
               ("R3", "higher-lower"): runs(0.35, 0.35, reward=0.9),
               ("R3", "reasoning-gym"): runs(0.21, 0.21, reward=0.9)}
    table = cells(figures)
    r1 = next(c for c in table if (c.recipe, c.env) == ("R1", "higher-lower"))
    assert (r1.runs, round(r1.success, 3), round(r1.delta, 3)) == (2, 0.35, 0.25)
    # R1 and R3 tie on the mean Δ to three decimals (0.18); R3's higher val reward wins.
    assert [r for r, _, _ in ranking(table)] == ["R3", "R1", "R0", "R2"]
    assert beats_reference(table, "R3") and not beats_reference(table, "R2")
    assert pruned(table) == ["R2"]  # below the best by > 0.05 on both early environments
    # A higher score is not a win when one environment falls below R0's by more than 0.02.
    figures[("R3", "reasoning-gym")] = runs(0.12, 0.12, reward=0.9)
    assert not beats_reference(cells(figures), "R3")


def test_the_ranking_reads_a_studys_finished_runs(tmp_path: Path) -> None:
    from examples.studies.defaults_rank import read_study
    from swarmrl_server.study.state import RunRecord

    text = (REPO / "examples" / "studies" / "defaults_higher_lower.yaml").read_text()
    study_file = tmp_path / "study.yaml"
    study_file.write_text(text.replace("../../runs/studies/", "./"))
    study = load_study(study_file, deep=False)
    for spec, curve in zip(expand(study)[:3], [(0.1, 0.3, 0.5), (0.1, 0.1, 0.1), None]):
        run_dir = tmp_path / "defaults-s1-higher-lower" / "runs" / spec.run_id
        (run_dir / "run").mkdir(parents=True)
        record = RunRecord(run_id=spec.run_id, stage=0, overrides=spec.overrides, seed=spec.seed)
        (run_dir / "run.json").write_text(record.model_dump_json())
        if curve is None:
            continue  # a run that has not written its card yet is left out
        evals = [{"split": "val", "train_seconds": 60.0 * 5 * i,
                  "figures": {"success_rate": s, "mean_reward": s}} for i, s in enumerate(curve)]
        (run_dir / "run" / "card.json").write_text(json.dumps(
            {"env": {"label": "higher-lower"}, "evals": evals, "finished": True}))
    figures = read_study(study_file)
    assert list(figures) == [("R0", "higher-lower")]  # runs 0 and 1 are R0's two seeds
    first, second = figures[("R0", "higher-lower")]
    # 0.1 -> 0.3 -> 0.5 over 10 minutes: (0.2 * 5 + 0.4 * 5) / 10; before 0.1.
    assert (round(first.success, 3), first.before) == (0.3, 0.1)
    assert round(second.success, 3) == 0.1
