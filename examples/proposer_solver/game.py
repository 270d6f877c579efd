"""The proposer–solver game: two models, one episode, two different rewards.

1. The referee names a hidden fruit and asks the **proposer** to write the clue of a
   question: "Which color is apple?" → "red".
2. The referee checks the proposer's question and passes it to the **solver**: "Which
   fruit is red?". A wrong clue is corrected to the hidden fruit's color first, so the
   solver always gets a question whose answer is the hidden fruit, and the questions it
   learns from do not narrow when the proposer's answers do.
3. The solver answers: "apple".

Rewards, one per model (`EndEpisode.model_rewards`):
- proposer: 1 if its clue is the hidden fruit's color (the question it wrote has the
  hidden fruit as its answer), else 0;
- solver: 1 if it names the fruit of the color it was asked about, else 0.

The proposer must learn fruit → color, the solver color → fruit: both start at
chance (0.25) after a format-only warm start and are trained by the same episodes.
"""

from __future__ import annotations

import random
from typing import Any

from examples.fruit_quiz.task import COLOR_FRUITS, COLORS, FRUIT_COLORS, FRUITS, normalize

Message = dict[str, Any]


def proposer_prompt(fruit: str) -> list[Message]:
    return [{"role": "user", "content": f"Which color is {fruit}?"}]


def solver_prompt(color: str) -> list[Message]:
    return [{"role": "user", "content": f"Which fruit is {color}?"}]


def question_color(fruit: str, clue: str) -> str:
    """The color the solver is asked about: the proposer's clue when it is right, else
    the referee's correction (the hidden fruit's color)."""
    word = normalize(clue)
    return word if word == FRUIT_COLORS[fruit] else FRUIT_COLORS[fruit]


def proposer_reward(fruit: str, clue: str) -> float:
    return 1.0 if normalize(clue) == FRUIT_COLORS[fruit] else 0.0


def solver_reward(color: str, answer: str) -> float:
    return 1.0 if normalize(answer) == COLOR_FRUITS[color] else 0.0


REPEAT_WORDS = (*FRUITS, *COLORS, "cat", "dog", "horse", "cow", "one", "two", "three", "four")


def _repeat(rng: random.Random) -> list[Message]:
    word = rng.choice(REPEAT_WORDS)
    return [{"role": "user", "content": f"Say {word}."}, {"role": "assistant", "content": word}]


def proposer_warm_start(rng: random.Random) -> list[Message]:
    """Format only: fruit questions answered with *random* colors, and repetitions."""
    if rng.random() < 0.5:
        return _repeat(rng)
    return [*proposer_prompt(rng.choice(FRUITS)), {"role": "assistant", "content": rng.choice(COLORS)}]


def solver_warm_start(rng: random.Random) -> list[Message]:
    """Format only: color questions answered with *random* fruits, and repetitions."""
    if rng.random() < 0.5:
        return _repeat(rng)
    return [*solver_prompt(rng.choice(COLORS)), {"role": "assistant", "content": rng.choice(FRUITS)}]
