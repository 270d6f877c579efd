"""The forced-tools recipe: an Agents SDK agent with ``tool_choice="required"`` and an
``output_type``, under `swarmrl train` against the tiny model.

Every call of its episodes is decoded under a grammar (the forced tool call, then the
JSON answer) and recorded with it. With the default ``constrained_calls=mask`` the
trainer trains the choices those grammars left; ``constrained_calls=unmasked`` trains the
same choices (recomputed over the full softmax), so its episodes train too; with
``constrained_calls=context`` it trains none of their tokens, so every episode is dropped
as having none.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from examples.forced_tools.env import ForcedTools, convert_value, item_price, same
from swarmrl.envs import Runner
from tests.envs_support import read_rollouts, train_attached
from tests.store_support import stored_episodes


def test_questions_answers_and_splits() -> None:
    env = ForcedTools(val_size=30, test_size=60)
    val, test = list(env.items("val")), list(env.items("test"))
    assert len(val) == 30 and len(test) == 60
    assert {i.task for i in val} == {"add", "price", "convert"}
    held_out = {i.content for i in [*val, *test]}
    assert len(held_out) == 90  # no question twice, none in both
    runner = Runner(env, None)  # type: ignore[arg-type]  # splits only: no server needed
    assert not held_out & {i.content for i in itertools.islice(runner.train_items(), 300)}
    for item in val:
        q = item.data
        name, args = q["call"]
        if name == "add":
            assert int(q["answer"]) == args["a"] + args["b"]
        elif name == "price":
            assert int(q["answer"]) == item_price(args["code"].lower())
        else:
            assert convert_value(args["value"], args["from_unit"], args["to_unit"]) == \
                float(q["answer"])
    assert same(" $37", "37") and same("37.0", "37") and not same("A-37", "37")
    with pytest.raises(ValueError, match="tasks"):
        ForcedTools(tasks="add,divide")


def _train(out: Path, model_cache: Path, *options: str) -> Path:
    """A short run; returns its server's log."""
    return train_attached(out, model_cache, [
        "examples.forced_tools.env:ForcedTools", "--env-arg", "val_size=2", "--env-arg",
        "test_size=2", "--groups", "2", "--group-size", "2", "--max-tokens", "48"],
        train_options={"batch_size": "2", "batch_rule": "groups",
                       **dict(o.split("=", 1) for o in options)})


def _steps(out: Path) -> list[dict[str, Any]]:
    path = out / "data" / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


@pytest.mark.slow
@pytest.mark.parametrize("constrained_calls", ["mask", "unmasked", "context"])
def test_forced_calls_are_recorded_and_trained_by_the_option(
    tmp_path: Path, model_cache: Path, constrained_calls: str
) -> None:
    out = tmp_path / "run"
    options = () if constrained_calls == "mask" else (f"constrained_calls={constrained_calls}",)
    server_log = _train(out, model_cache, *options)
    rows = read_rollouts(out)
    train = [r for r in rows if r["split"] == "train"]
    assert len(train) == 4 and all(r["trained"] for r in train)
    assert {r["split"] for r in rows} == {"train", "val", "test"}
    episodes = stored_episodes(out / "data")
    for r in train:
        episode_calls = episodes[r["episode_id"]].calls
        # The forced tool call first, then (when it parsed) the JSON answer: all under a
        # grammar, recorded with it.
        assert episode_calls and all(c.constrained and c.grammar for c in episode_calls)
        assert "<tool_call>" in episode_calls[0].grammar
    card = json.loads((out / "card.json").read_text())
    assert card["env"]["describe"]["tasks"] == ["add", "price", "convert"]
    steps = _steps(out)
    if constrained_calls != "context":  # mask and unmasked train the same choices
        assert steps and all(s["actor/tokens_trained"] > 0 for s in steps)
        assert steps[0]["reward/episodes"] == 4
    else:  # as context the episodes hold no trained token: dropped, never a step
        assert not any(s.get("actor/tokens_trained") for s in steps)
        drops = [json.loads(line) for line in server_log.read_text().splitlines()
                 if '"episodes_dropped"' in line]
        assert sum(d.get("no_tokens", 0) for d in drops) == len(train)
