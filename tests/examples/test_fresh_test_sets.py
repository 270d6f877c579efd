"""Fresh test sets as env args (issue #50): ``test_seed`` (reasoning-gym, forced tools) and
``test_seed_base`` (TextWorld). The default is the earlier test set, item for item, so the
split hashes every committed card recorded still hold; another seed gives a test set no
earlier test item, val item or training item shares by content; val is the same whatever
the test seed; ``describe()`` (what the card records) names the seed.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from examples.forced_tools.env import ForcedTools
from examples.reasoning_gym.env import ReasoningGym
from examples.textworld.env import TEST_SEED_BASE, TextWorld
from swarmrl.envs import Environment, Item, Runner
from swarmrl.envs._card import split_digest
from tests.helpers import REPO

CARDS = REPO / "results" / "cards"
ENVS: dict[str, type[Environment]] = {"ReasoningGym": ReasoningGym, "ForcedTools": ForcedTools,
                                      "TextWorld": TextWorld}


def _cards(env: str) -> list[dict[str, Any]]:
    cards = [json.loads(p.read_text()) for p in sorted(CARDS.glob("*.json"))]
    return [c for c in cards if c["env"]["spec"].endswith(f":{env}")]


def _contents(items: Any) -> set[str]:
    return {str(i.content) for i in items}


def _check_card_splits(env_name: str, **extra: Any) -> int:
    """Every committed card of the environment: its splits, made again with the card's env
    args and the default test seed, hash as recorded. Returns how many cards."""
    cards = _cards(env_name)
    assert cards, f"no committed card of {env_name}"
    made: dict[str, dict[str, str]] = {}
    for card in cards:
        key = json.dumps(card["env"]["args"], sort_keys=True)
        if key not in made:
            env = ENVS[env_name](**card["env"]["args"], **extra)
            made[key] = {split: split_digest(list(env.items(split))) for split in ("val", "test")}
        for split in ("val", "test"):
            assert made[key][split] == card["splits"][split]["sha256"], (card["argv"], split)
    return len(cards)


@pytest.mark.parametrize("env_name", ["ReasoningGym", "ForcedTools"])
def test_the_default_test_seed_gives_every_cards_splits(env_name: str) -> None:
    assert _check_card_splits(env_name) >= 2


CARDS_SERIAL = b"261206"
"""The Z-machine serial number of the games behind the committed TextWorld cards: Inform
stamps the compile date (YYMMDD) into the story file's header (bytes 0x12-0x17, outside
the checksummed range), so a game compiled on another day differs in those six bytes."""


@pytest.mark.slow  # compiles the 60 level-2 games of val and test (Inform 7, ~1 s a game)
def test_the_default_test_seed_base_gives_every_textworld_cards_splits(
        textworld_games: Path, tmp_path: Path) -> None:
    cards = _cards("TextWorld")
    env = TextWorld(**cards[0]["env"]["args"], games_dir=str(textworld_games))
    games = [Path(i.data["game"]) for split in ("val", "test") for i in env.items(split)]
    # The same games, dated as the cards' were: then the splits hash as the cards say.
    (tmp_path / "level2").mkdir()
    for game in games:
        data = bytearray(game.read_bytes())
        assert data[0x12:0x18].isdigit()
        data[0x12:0x18] = CARDS_SERIAL
        (tmp_path / "level2" / game.name).write_bytes(bytes(data))
        shutil.copy(game.with_suffix(".json"), tmp_path / "level2")
    assert _check_card_splits("TextWorld", games_dir=str(tmp_path)) >= 2


def _check_fresh(default: Environment, fresh: Environment, size: int) -> list[Item]:
    """The fresh test set: as large, all new against the earlier test, val and train (the
    runner's train stream, which skips held-out content); val unchanged."""
    old_test, old_val = list(default.items("test")), list(default.items("val"))
    test, val = list(fresh.items("test")), list(fresh.items("val"))
    assert len(test) == len(old_test) == size
    assert split_digest(val) == split_digest(old_val)  # val does not move with the test seed
    assert split_digest(test) != split_digest(old_test)
    assert not _contents(test) & (_contents(old_test) | _contents(val))
    runner = Runner(fresh, None)  # type: ignore[arg-type]  # splits only: no server needed
    assert not _contents(test) & _contents(itertools.islice(runner.train_items(), 300))
    return test


def test_reasoning_gym_test_seed_draws_a_fresh_test_set() -> None:
    # Level 1's small question spaces: the earlier test set and val share questions with
    # what the fresh seed draws, so the fresh set must leave some out.
    default = ReasoningGym(level=1, val_size=10, test_size=20)
    fresh = ReasoningGym(level=1, val_size=10, test_size=20, test_seed=40261207)
    test = _check_fresh(default, fresh, 60)
    assert {i.id.split("/")[1] for i in test} == {"40261207"}
    assert fresh.describe()["test_seed"] == 40261207
    assert default.describe()["test_seed"] == 20261203
    # Some of the fresh seed's first 20 sums were earlier test or val questions: skipped.
    indices = [int(i.id.split("/")[2]) for i in test if i.task == "basic_arithmetic"]
    assert len(indices) == 20 and max(indices) > 19
    with pytest.raises(ValueError, match="test_seed=40261207: only"):  # too few new ones
        ReasoningGym(level=1, mix="leg_counting", test_size=60,
                     test_seed=40261207).items("test")


def test_forced_tools_test_seed_draws_a_fresh_test_set() -> None:
    default, fresh = ForcedTools(), ForcedTools(test_seed=7101)
    _check_fresh(default, fresh, 60)
    assert fresh.describe()["seeds"][0] == 7101 and default.describe()["seeds"][0] == 7001
    # A test seed that is val's: every val question is left out, so none comes back.
    _check_fresh(default, ForcedTools(test_seed=7002), 60)


def test_textworld_test_seed_base_makes_fresh_games(textworld_games: Path) -> None:
    counts = dict(train_games=2, val_games=1, test_games=2, games_dir=str(textworld_games))
    default = TextWorld(level=1, **counts)  # type: ignore[arg-type]
    fresh = TextWorld(level=1, test_seed_base=300_000, **counts)  # type: ignore[arg-type]
    test = _check_fresh(default, fresh, 2)
    assert [i.id for i in test] == ["seed300001", "seed300002"]
    assert fresh.describe()["test_seed_base"] == 300_000
    assert default.describe()["test_seed_base"] == TEST_SEED_BASE
    # Seeds that run into the earlier test set's: its games are left out by content.
    overlapping = TextWorld(level=1, test_seed_base=TEST_SEED_BASE + 1, **counts)  # type: ignore[arg-type]
    assert [i.id for i in _check_fresh(default, overlapping, 2)] == ["seed100003", "seed100004"]
