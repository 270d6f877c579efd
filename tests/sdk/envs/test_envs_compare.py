"""`swarmrl compare`: two evaluations of the same items, paired item by item.

The exact McNemar p-value against the binomial test's own definition (the probability,
under Binomial(n, 1/2), of every outcome no likelier than the observed one, summed in
exact fractions); the paired figures on run folders as `swarmrl train`/`eval` write them;
refusals when the runs did not evaluate the same items."""

from __future__ import annotations

import json
from fractions import Fraction
from math import comb
from pathlib import Path

import pytest

from swarmrl._cli import main
from swarmrl.envs._compare import paired
from swarmrl.envs._stats import mcnemar_exact


def binomial_test(k: int, n: int) -> float:
    """Two-sided exact binomial test of k successes in n fair coin flips."""
    pmf = [Fraction(comb(n, i), 2 ** n) for i in range(n + 1)]
    return float(sum(p for p in pmf if p <= pmf[k]))


@pytest.mark.parametrize(("only_a", "only_b"), [(0, 0), (0, 1), (3, 3), (2, 9), (0, 32),
                                                (17, 4), (40, 55)])
def test_mcnemar_exact_is_the_binomial_test_of_the_discordant_items(
        only_a: int, only_b: int) -> None:
    n = only_a + only_b
    want = 1.0 if n == 0 else min(1.0, binomial_test(only_b, n))
    assert mcnemar_exact(only_a, only_b) == pytest.approx(want, rel=1e-9)


def _row(item: int, success: bool, *, version: int = 0, split: str = "test",
         error: str = "", attempt: int = 0) -> dict[str, object]:
    if error:  # as the runner records a failed rollout: no reward, no success, no version
        return {"split": split, "item_id": f"{split}/{item}", "reward": None,
                "success": None, "error": error, "policy_versions": [], "attempt": attempt}
    return {"split": split, "item_id": f"{split}/{item}", "reward": float(success),
            "success": success, "error": error, "policy_versions": [version]}


def _run(folder: Path, rows: list[dict[str, object]], sha: str = "abc",
         evals: list[dict[str, object]] | None = None) -> Path:
    folder.mkdir()
    (folder / "card.json").write_text(json.dumps({
        "env": {"spec": "m:E"}, "splits": {"test": {"sha256": sha}, "val": {"sha256": "v"}},
        "evals": evals or []}))
    (folder / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_runs_are_paired_item_by_item(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    # 10 items: both solve 0-3, only B solves 4-8, only A solves 9.
    a = [_row(i, i < 4 or i == 9) for i in range(10)]
    b = [_row(i, i < 9) for i in range(11)]
    with pytest.raises(ValueError, match="different items"):
        paired(a, b)  # item 10 only in B
    b = b[:10]
    result = paired(a, b)
    assert (result.items, result.only_a, result.only_b) == (10, 1, 5)
    assert (result.success_a, result.success_b) == (0.5, 0.9)
    assert result.mcnemar_p == pytest.approx(binomial_test(5, 6))
    low, high = result.success_diff_ci95 or (0.0, 0.0)
    assert low <= 0.4 <= high and result.reward_diff == pytest.approx(0.4)

    run_a = _run(tmp_path / "a", a + [_row(0, False, version=3, split="val")])
    run_b = _run(tmp_path / "b", b)
    assert main(["compare", str(run_a), str(run_b), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["items"], figures["only_b"], figures["only_a"]) == (10, 5, 1)
    # Two rollouts per item (k = 2): success compared by the paired bootstrap alone.
    twice = _run(tmp_path / "twice", b + b)
    assert main(["compare", str(run_a), str(twice), "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert figures["mcnemar_p"] is None and figures["success_b"] == 0.9


def test_runs_of_other_items_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    rows = [_row(i, True) for i in range(4)]
    run_a, other = _run(tmp_path / "a", rows), _run(tmp_path / "b", rows, sha="other")
    assert main(["compare", str(run_a), str(other)]) == 2
    assert "splits differ" in capsys.readouterr().err
    assert main(["compare", str(run_a), f"{run_a}@7", "--split", "test"]) == 2
    assert "no test rollouts on version 7" in capsys.readouterr().err
    assert main(["compare", str(run_a), str(tmp_path / "missing")]) == 2
    assert "no card.json" in capsys.readouterr().err


def test_a_failed_rollout_is_a_failure_not_another_item(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Item 3 failed in A (a timeout; an earlier attempt of item 2 failed and was retried):
    the runs still evaluated the same items; A's failure is not solved and has no reward."""
    a = [_row(i, True) for i in range(2)] + [_row(2, False, error="server: UNAVAILABLE"),
                                             {**_row(2, True), "attempt": 1},
                                             _row(3, False, error="timed out")]
    b = [_row(i, True) for i in range(4)]
    result = paired(a, b)
    assert (result.items, result.failed_a, result.failed_b) == (4, 1, 0)
    assert (result.success_a, result.success_b) == (0.75, 1.0)
    assert (result.only_a, result.only_b) == (0, 1)
    assert result.reward_diff == 0.25  # the failure's reward counts as 0
    run_a, run_b = _run(tmp_path / "a", a), _run(tmp_path / "b", b)
    assert main(["compare", str(run_a), str(run_b)]) == 0
    assert "failed rollouts (not solved, reward 0): A 1, B 0" in capsys.readouterr().out


def test_val_evaluations_are_not_pooled_without_a_version(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A train run's val holds an evaluation per pinned version: comparing its val needs
    RUN@VERSION; named, a version keeps its own rollouts (a failed one included)."""
    evals = [{"name": "before", "split": "val", "pinned_version": 0},
             {"name": "after", "split": "val", "pinned_version": 4}]
    rows = ([_row(i, False, split="val") for i in range(3)]
            + [_row(0, True, version=4, split="val"), _row(1, False, split="val", error="x"),
               _row(2, True, version=4, split="val")])
    run = _run(tmp_path / "a", rows, evals=evals)
    assert main(["compare", str(run), str(run), "--split", "val"]) == 2
    err = capsys.readouterr().err
    assert "2 val evaluations (before (version 0), after (version 4))" in err
    assert f"name one as {run}@VERSION" in err
    assert main(["compare", f"{run}@0", f"{run}@4", "--split", "val", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["items"], figures["only_b"], figures["success_b"]) == (3, 2, 2 / 3)
    assert (figures["failed_a"], figures["failed_b"]) == (0, 1)  # item 1 failed on version 4


def test_rows_of_an_evaluation_cut_short_are_left_out(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run killed during its val evaluation on version 4 and resumed plays val on version
    4 again: the card lists the first, partial evaluation's rows (by time), and comparing
    RUN@4 pairs only the recorded evaluation's."""
    partial = [{**_row(i, False, version=4, split="val"), "time": 10.0 + i} for i in range(2)]
    whole = [{**_row(i, True, version=4, split="val"), "time": 20.0 + i} for i in range(3)]
    run = _run(tmp_path / "a", partial + whole,
               evals=[{"name": "after", "split": "val", "pinned_version": 4}])
    card = json.loads((run / "card.json").read_text())
    card["cut_evaluations"] = [{"split": "val", "after": 9.0, "until": 11.0, "rows": 2}]
    (run / "card.json").write_text(json.dumps(card))
    assert main(["compare", f"{run}@4", f"{run}@4", "--split", "val", "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["items"], figures["success_a"], figures["mcnemar_p"]) == (3, 1.0, 1.0)
