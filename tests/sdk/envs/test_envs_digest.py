"""An item's digest is canonical: equal data, one digest, in every process.

The runner keeps val and test out of training by digest, and `swarmrl compare` matches
runs by their splits' hashes, so a digest that changed with the process (a set of strings
iterates in an order `PYTHONHASHSEED` picks) or with how a number is written (1 or 1.0)
would let a held-out item into train on another machine, or refuse a fair comparison.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swarmrl.envs import Item
from swarmrl.envs._api import canonical_json

REPO = Path(__file__).resolve().parents[3]
DATA = {
    "tags": {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"},
    "frozen": frozenset({"x", "y", "z", "w"}),
    "nested": [{"b": (1, 2.0), "a": {"k", "j"}}, {3: "three", "two": 2}],
    "ratio": 0.25,
}
"""Data whose old digest (`json.dumps(default=str)`) depended on the hash seed: sets of
strings, whose iteration order it picks."""

PRINT_DIGEST = f"""
import json, sys
from swarmrl.envs import Item
data = {DATA!r}
print(json.dumps([Item("i", data).digest, Item("j", {{"s": set(map(str, range(50)))}}).digest]))
"""


def digests_in_a_process(seed: str) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run([sys.executable, "-c", PRINT_DIGEST], env=env, cwd=REPO, check=True,
                         capture_output=True, text=True, timeout=120)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_one_digest_in_every_process_whatever_the_hash_seed() -> None:
    here = [Item("i", DATA).digest, Item("j", {"s": set(map(str, range(50)))}).digest]
    seeds = ["0", "1", "4242"]
    assert [digests_in_a_process(s) for s in seeds] == [here] * len(seeds)


def test_the_set_orders_that_made_digests_differ_do_occur() -> None:
    """The data above does iterate differently under those seeds (what the old digest
    hashed), so the test above would fail with a digest that hashed iteration order."""
    script = "import sys; print(list({'alpha','beta','gamma','delta','epsilon','zeta'}))"
    orders = {subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                             text=True, env={**os.environ, "PYTHONHASHSEED": s}).stdout
              for s in ("0", "1", "4242")}
    assert len(orders) > 1


@pytest.mark.parametrize(("a", "b"), [
    ({"n": 1}, {"n": 1.0}),
    ({"n": [0, 2, -3]}, {"n": [0.0, 2.0, -3.0]}),
    ({"n": 0}, {"n": -0.0}),
    ({"n": 10**20}, {"n": 1e20}),
    ({"s": {"b", "a"}}, {"s": frozenset({"a", "b"})}),
    ({"s": {"b", "a"}}, {"s": ["a", "b"]}),  # a set is written as its sorted list
    ({"t": (1, "x")}, {"t": [1, "x"]}),
    ({"k": {2: "b", 1: "a"}}, {"k": {"1": "a", "2": "b"}}),  # keys as JSON writes them
    ({"k": {1.0: "a"}}, {"k": {1: "a"}}),
    ({"x": float("nan")}, {"x": float("nan")}),
    ({"b": 2, "a": 1}, {"a": 1, "b": 2}),
])
def test_equal_data_one_digest(a: dict[str, object], b: dict[str, object]) -> None:
    assert Item("a", a).digest == Item("b", b).digest


@pytest.mark.parametrize(("a", "b"), [
    ({"n": 1}, {"n": 1.5}),
    ({"n": 1}, {"n": True}),  # JSON's true is not 1
    ({"n": 1}, {"n": "1"}),
    ({"x": float("inf")}, {"x": float("-inf")}),
    ({"x": None}, {}),
])
def test_different_data_different_digests(a: dict[str, object], b: dict[str, object]) -> None:
    assert Item("a", a).digest != Item("b", b).digest


def test_mixed_key_types_are_digested() -> None:
    data = {1: "one", "two": 2, None: 0, (3, 4): "pair", 2.5: "x"}
    assert canonical_json(data) == '{"1":"one","2.5":"x","[3,4]":"pair","null":0,"two":2}'
    assert Item("i", data).digest == Item("i", dict(reversed(data.items()))).digest


def test_keys_that_json_would_merge_are_refused() -> None:
    with pytest.raises(TypeError, match=r"item 'i': data: keys '1' and '1' are one JSON key.*"
                                        r"Item\.content"):
        _ = Item("i", {1: "a", "1": "b"}).digest


@pytest.mark.parametrize("value", [Path("/tmp/game.z8"), b"bytes", object(), 1j])
def test_a_value_without_a_canonical_form_is_refused(value: object) -> None:
    with pytest.raises(TypeError) as err:
        _ = Item("q-7", {"game": [value]}).digest
    message = str(err.value)
    assert message.startswith("item 'q-7': data['game'][0]: a ")
    assert "set Item.content" in message
    assert Item("q-7", {"game": [value]}, content="the game's text").digest == hashlib.sha256(
        b"the game's text").hexdigest()  # content identifies the item instead


def test_plain_json_data_keeps_the_digest_it_had() -> None:
    """For strings, ints, non-integral floats, lists and string-keyed dicts the canonical
    text is the one the digest always hashed: split hashes in existing cards still hold."""
    data = {"q": "Ünïcode \"quoted\"", "n": [1, 2, -3], "f": 0.1, "d": {"z": None, "a": True}}
    old = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    assert canonical_json(data) == old
    assert Item("i", data).digest == hashlib.sha256(old.encode()).hexdigest()
