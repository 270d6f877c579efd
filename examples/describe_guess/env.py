"""Describe and guess: two roles that must cooperate, trained as two adapters of one base.

    swarmrl train examples.describe_guess.env:DescribeGuess --role-base smollm2 \
        --role describer=describer --role guesser=guesser --minutes 30

**Game.** The describer sees a secret word and writes a one-line clue that must not
contain the word; the guesser sees the clue and four candidate words (the secret and
three others, shuffled) and answers with one. Success: the guesser names the secret.
Guessing blind succeeds a quarter of the time, so what is above 0.25 is the pair's skill.

**Rewards, per role.** The guesser: 1 when it names the secret. The describer: 1 when the
guesser names the secret and its clue does not contain the word (a clue that says the
word scores 0 for the describer, is a `leak` in the metrics, and reaches the guesser with
the word masked: neither role wins by the describer cheating). Each role's episode is ended
with its own reward, so each adapter trains on its own.

**Evaluations** (docs/how-to/multi-agent.md): the trained pair; each trained role with the
frozen base model as its partner (``--role guesser=base:frozen``), which tells a skill from
a private code between two co-adapted agents; and the swapped pair.

**Splits.** A game is ``(secret, candidates)`` drawn by ``random.Random`` from a recorded
seed per split; each split's secrets come from its own third of the word list, so no val
or test secret is ever trained on. An item's content is its game's text.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

from swarmrl.envs import Environment, Item, Outcome, Rollout, Split

WORDS = (
    "apple banana carrot lemon onion grape melon peach cherry potato "
    "tiger horse rabbit eagle shark whale snake mouse camel zebra "
    "piano violin drum guitar trumpet flute harp organ bell whistle "
    "chair table lamp mirror pillow blanket candle clock window door "
    "train bicycle rocket boat truck airplane tractor bus canoe sled "
    "river mountain desert island forest volcano glacier beach cave meadow").split()
SEEDS = {"train": 71_120_701, "val": 71_120_702, "test": 71_120_703}
DESCRIBE = ("We are playing a word game. The secret word is \"{secret}\". Write one short "
            "clue (at most 12 words) that lets your partner guess it. Do not write the "
            "word itself.")
GUESS = ("We are playing a word game. Your partner's clue is: \"{clue}\"\nWhich of these "
         "words is it: {options}? Answer with the word only.")


def pool(split: Split) -> list[str]:
    """The secrets a split draws from: every third word, by split (disjoint)."""
    offset = {"train": 0, "val": 1, "test": 2}[split]
    return WORDS[offset::3]


def game(rng: random.Random, split: Split) -> dict[str, object]:
    secret = rng.choice(pool(split))
    others = rng.sample([w for w in WORDS if w != secret], 3)
    options = [secret, *others]
    rng.shuffle(options)
    return {"secret": secret, "options": options}


def answer(reply: str, options: list[str]) -> str | None:
    """The first candidate the reply names (whole word, any case), or None."""
    found = [(m.start(), w) for w in options
             for m in [re.search(rf"\b{w}\b", reply, re.I)] if m]
    return min(found)[1] if found else None


class DescribeGuess(Environment):
    """A describer and a guesser (see the module docstring)."""

    name = "describe_guess"
    roles = ("describer", "guesser")

    def __init__(self, n_val: int = 60, n_test: int = 120, seed: int = 0) -> None:
        self.n = {"val": n_val, "test": n_test}
        self.seed = seed

    def describe(self) -> dict[str, object]:
        return {"n_val": self.n["val"], "n_test": self.n["test"], "seed": self.seed}

    def items(self, split: Split) -> Iterator[Item]:
        rng = random.Random(SEEDS[split] + (self.seed if split == "train" else 0))
        i = 0
        while split == "train" or i < self.n[split]:
            g = game(rng, split)
            text = f"{g['secret']}:{','.join(g['options'])}"  # type: ignore[arg-type]
            yield Item(f"{split}-{i}", g, content=text)
            i += 1

    async def play(self, rollout: Rollout) -> Outcome:
        g = rollout.item.data
        secret, options = g["secret"], list(g["options"])
        clue = (await rollout.chat([{"role": "user", "content": DESCRIBE.format(
            secret=secret)}], role="describer", max_tokens=32)).text.strip()
        leak = re.search(rf"\b{secret}", clue, re.I) is not None
        shown = re.sub(rf"\b{secret}\w*", "___", clue, flags=re.I)  # a leak is not shown
        reply = (await rollout.chat([{"role": "user", "content": GUESS.format(
            clue=shown, options=", ".join(options))}], role="guesser", max_tokens=8)).text
        won = answer(reply, options) == secret
        return Outcome(
            rewards={"describer": float(won and not leak), "guesser": float(won)},
            success=won, metrics={"leak": float(leak), "answered": float(
                answer(reply, options) is not None)},
            info={"clue": clue[:200], "reply": reply[:100]})
