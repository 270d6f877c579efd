"""The fruit quiz environment: pure Python, no model, no network.

One episode is a short conversation with two model calls and environment
feedback between them:

1. The environment asks "Which fruit is <color>?".
2. The agent answers with one word.
3. The environment says whether that was right, then asks "Which fruit is
   <color>?" again, about a color that the fruit the agent just named does *not*
   have: after a right answer that is a new question; after a wrong one it may be
   the same question again (a second chance, which an agent can learn to use).
4. The agent answers with one word.

Reward: the fraction of correct answers, in {0, 0.5, 1}. An agent that names a
random fruit scores about 0.25; one that knows the four facts scores 1.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

FRUIT_COLORS = {"apple": "red", "banana": "yellow", "grape": "purple", "lime": "green"}
"""The facts the agent must learn (each word is one token of the tiny model)."""
FRUITS = tuple(FRUIT_COLORS)
COLORS = tuple(FRUIT_COLORS.values())
COLOR_FRUITS = {c: f for f, c in FRUIT_COLORS.items()}

Message = dict[str, Any]


def normalize(reply: str) -> str:
    """The answer word: lowercase, without surrounding spaces and punctuation."""
    return reply.strip().strip(".!?,;:'\"").lower()


def question(color: str) -> str:
    return f"Which fruit is {color}?"


@dataclass
class FruitQuiz:
    """One episode of the quiz; drive it with `messages` and `answer`."""

    color: str
    """The color the first question asks about."""
    rng: random.Random = field(default_factory=random.Random)
    """Picks the second question."""
    messages: list[Message] = field(default_factory=list)
    colors_asked: list[str] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.color not in COLOR_FRUITS:
            raise ValueError(f"unknown color {self.color!r}; choose from {COLORS}")
        # No system prompt: every prompt token costs training time on a 2-core CPU, and
        # the warm start teaches the answer format.
        self.colors_asked = [self.color]
        self.messages = [{"role": "user", "content": question(self.color)}]

    @property
    def task_id(self) -> str:
        return f"fruit-quiz/{self.color}"

    @property
    def done(self) -> bool:
        return len(self.correct) == 2

    @property
    def reward(self) -> float:
        return sum(self.correct) / 2

    def answer(self, reply: Message) -> None:
        """Takes the agent's reply message (as the server returned it) and moves on."""
        if self.done:
            raise RuntimeError("the quiz is over")
        self.messages.append(reply)
        word = normalize(reply.get("content") or "")
        right = word == COLOR_FRUITS[self.colors_asked[-1]]
        self.correct.append(right)
        if self.done:
            return
        # Never ask about the color of the fruit just named: "say it again" is no strategy.
        named = FRUIT_COLORS.get(word, self.colors_asked[-1] if right else "")
        color = self.rng.choice([c for c in COLORS if c != named])
        self.colors_asked.append(color)
        verdict = "Correct." if right else "Wrong."
        self.messages.append({"role": "user", "content": f"{verdict} {question(color)}"})


def random_demonstration(rng: random.Random) -> list[Message]:
    """A quiz conversation where the agent answers with *random* fruits.

    Supervised training on these teaches the format (one fruit per answer) but not
    the facts: every fruit is equally likely after "Which fruit is red?".
    """
    quiz = FruitQuiz(rng.choice(COLORS), rng=rng)
    quiz.answer({"role": "assistant", "content": rng.choice(FRUITS)})
    quiz.answer({"role": "assistant", "content": rng.choice(FRUITS)})
    return quiz.messages


REPEAT_WORDS = (*FRUITS, *COLORS, "cat", "dog", "horse", "cow", "one", "two", "three", "four",
                "Paris", "London", "Tokyo", "Rome")


def repeat_demonstration(rng: random.Random) -> list[Message]:
    """"Say <word>." answered with the word: a stand-in for the instruction following a
    pretrained model brings. Without it, training on random answers teaches a tiny
    model to ignore the question altogether, and RL must rebuild that path first."""
    word = rng.choice(REPEAT_WORDS)
    return [{"role": "user", "content": f"Say {word}."}, {"role": "assistant", "content": word}]


def warm_start_conversation(rng: random.Random, repeat_fraction: float = 0.5) -> list[Message]:
    """What the demo's supervised warm start trains on: format and repetition, no facts."""
    if rng.random() < repeat_fraction:
        return repeat_demonstration(rng)
    return random_demonstration(rng)
