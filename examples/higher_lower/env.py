"""Higher or lower: a multi-turn number-guessing game, written as a user writes one.

    swarmrl train examples.higher_lower.env:HigherLower --model smollm2 --minutes 15

**What it measures.** Whether a model *uses what the environment tells it between turns*,
and uses it well. The environment holds a secret whole number among ``size`` numbers
(16 by default, e.g. 27..42); the model has ``turns`` guesses (5). After a wrong guess
the environment answers "My number is higher than 30. What is your next guess? Answer
with a number from 31 to 42.". Success (the held-out figure) is finding the number
within ``turns`` guesses. Guessing up from the bottom of what is left finds it
``turns / size`` of the time (0.31), a guess anywhere in what is left 0.77 of the time,
and halving what is left always (16 numbers take 5 guesses). SmolLM2-135M-Instruct,
greedy, guesses the bottom and then one more each turn (val success 0.175, 7 of 40: the
val games with the secret among the first five numbers; results/studies/), so what there
is to learn is a rule, not knowledge: aim at the middle of what is left.

**Episode.** One swarmrl episode per game, one SDK chat call per guess; each call's
prompt is the previous prompt, the model's reply (the message the server returned) and
the environment's answer, so the episode merges into one training sequence. The guess
is the last whole number of the reply; a reply with none costs its turn. **Reward**: 1
for finding the number; otherwise ``partial`` (0.25) times the share of the range the
answers ruled out, a small credit for searching well that is never worth a win.

**Splits.** A game is ``(low, high, secret)``, drawn by ``random.Random`` from a recorded
generator seed per split: test from ``TEST_SEED``, val from ``VAL_SEED`` (leaving out
test's games), train from ``TRAIN_SEED + seed``, endless. No run used these seeds before
this environment was written. An item's content is its game's text (``"16-31:27"``), so
the runner skips a training game that is also a val or test game (there are 1,344 games
at the defaults, so training meets some).
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterator
from typing import Any

from swarmrl.envs import Environment, Item, Outcome, Rollout, Split

PROMPT = ("Guess the secret number. It is one of the whole numbers from {low} to {high}. "
          "What is your guess? Answer with a single number.")
NEXT = "My number is {way} than {guess}. What is your next guess? Answer with a number from {a} to {b}."
TEST_SEED = 50_261_207
VAL_SEED = 50_261_208
TRAIN_SEED = 60_261_207
TOP = 99  # numbers stay at two digits or fewer
NUMBER = re.compile(r"-?\d+")


def parse_guess(reply: str) -> int | None:
    """The last whole number of the reply, or None when it has none."""
    numbers = NUMBER.findall(reply)
    return int(numbers[-1]) if numbers else None


def make_game(rng: random.Random, size: int) -> dict[str, int]:
    low = rng.randint(1, TOP - size + 1)
    return {"low": low, "high": low + size - 1, "secret": rng.randint(low, low + size - 1)}


def game_text(game: dict[str, Any]) -> str:
    return f"{game['low']}-{game['high']}:{game['secret']}"


def answer(guess: int | None, secret: int, allowed: list[int]) -> str:
    """The environment's turn after a wrong guess; narrows `allowed` ([low, high]) in place."""
    if guess is None:
        return f"Answer with a number from {allowed[0]} to {allowed[1]}."
    if guess < secret:
        allowed[0] = max(allowed[0], guess + 1)
    else:
        allowed[1] = min(allowed[1], guess - 1)
    way = "higher" if guess < secret else "lower"
    return NEXT.format(way=way, guess=guess, a=allowed[0], b=allowed[1])


class HigherLower(Environment):
    """Find a number in ``size`` numbers within ``turns`` guesses, told higher or lower."""

    name = "higher-lower"

    def __init__(self, size: int = 16, turns: int = 5, val_size: int = 40,
                 test_size: int = 80, seed: int = 0, max_tokens: int = 8,
                 partial: float = 0.25) -> None:
        if not 2 <= size <= TOP:
            raise ValueError(f"size must be 2..{TOP}, got {size}")
        if turns < 1:
            raise ValueError(f"turns must be at least 1, got {turns}")
        self.size, self.turns = size, turns
        self.sizes = {"val": val_size, "test": test_size}
        self.seed, self.max_tokens, self.partial = seed, max_tokens, partial

    def describe(self) -> dict[str, Any]:
        return {"size": self.size, "turns": self.turns, "sizes": self.sizes,
                "seed": self.seed, "seeds": {"test": TEST_SEED, "val": VAL_SEED,
                                             "train": TRAIN_SEED + self.seed},
                "max_tokens": self.max_tokens, "partial": self.partial,
                "prompt": PROMPT, "next": NEXT}

    def _stream(self, split: str, seed: int) -> Iterator[Item]:
        rng = random.Random(seed)
        for i in itertools.count():
            game = make_game(rng, self.size)
            yield Item(f"{split}/{i}", game, task=f"size{self.size}", content=game_text(game))

    def _held_out(self, split: str, seed: int, size: int, taken: set[str]) -> list[Item]:
        out: list[Item] = []
        for item in self._stream(split, seed):  # distinct games, none of `taken`
            if len(out) == size:
                return out
            if item.content not in taken:
                taken.add(str(item.content))
                out.append(item)
        raise AssertionError("unreachable: the stream is endless")

    def items(self, split: Split) -> list[Item] | Iterator[Item]:
        if split == "train":
            return self._stream(split, TRAIN_SEED + self.seed)
        test = self._held_out("test", TEST_SEED, self.sizes["test"], set())
        if split == "test":
            return test
        return self._held_out("val", VAL_SEED, self.sizes["val"], {str(i.content) for i in test})

    async def play(self, rollout: Rollout) -> Outcome:
        game = rollout.item.data
        low, high, secret = game["low"], game["high"], game["secret"]
        messages: list[Any] = [{"role": "user", "content": PROMPT.format(
            low=low, high=high)}]
        allowed = [low, high]  # what the answers so far leave
        guesses: list[int | None] = []
        consistent, found = 0, False
        for _ in range(self.turns):
            c = await rollout.chat(messages, max_tokens=rollout.sampling.max_tokens
                                   or self.max_tokens)
            messages.append(c.message)
            guess = parse_guess(c.text)
            guesses.append(guess)
            if guess is not None:
                consistent += allowed[0] <= guess <= allowed[1]
                found = guess == secret
                if found:
                    break
            messages.append({"role": "user", "content": answer(guess, secret, allowed)})
        ruled_out = 1 - (allowed[1] - allowed[0] + 1) / self.size
        return Outcome(reward=1.0 if found else self.partial * ruled_out, success=found,
                       metrics={"guesses": float(len(guesses)), "ruled_out": ruled_out,
                                "consistent": consistent / len(guesses),
                                "parsed": sum(g is not None for g in guesses) / len(guesses)},
                       info={"secret": secret, "guesses": guesses,
                             "replies": [m["content"] for m in messages
                                         if m.get("role") == "assistant"]})
