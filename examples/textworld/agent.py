"""A TextWorld agent: an ordinary OpenAI-client program (it imports nothing from swarmrl).

    swarmrl run --task-id textworld/GAME -- python -m examples.textworld.agent --game GAME.z8

It reads ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` (what ``swarmrl run`` sets to a fresh
episode's shim URL and key) and ``SWARMRL_MODEL``, plays one game up to ``--max-steps``
commands, and writes ``{"reward": ...}`` to ``$SWARMRL_REWARD_FILE``. `play` is the
same loop for a caller that passes its own ``OpenAI`` client (examples/textworld/env.py
passes one bound to a rollout's episode).

**One turn.** The conversation is the game so far: a system message with the goal,
then per step a user message (what the game said, then the commands it accepts now)
and the model's reply. How a reply picks a command is the ``choice`` (`CHOICES`):

- ``number`` (the default): the commands are numbered and the reply's first number picks
  (a reply naming a command verbatim picks that one);
- ``text``: the commands are listed one a line after the goal, restated,
  and the reply is a command itself: the command it names first picks (the longest, when
  several start there). Copying the command that matches the goal is a skill a small
  instruct model already has, where a number needs the model to index the list. One
  made-up turn and its answer (`EXAMPLE`) come before the game: without it SmolLM2
  narrates ("You're in a closet. A standard one.") on every turn of every game.

Anything else becomes ``look`` (the step is spent). Every turn re-sends the whole
history, so each call's prompt extends the previous call's prompt + completion token
for token and the server merges the episode into one timeline.

**Reward** (from the game): ``(score / max_score + won) / 2``: the quest's points
and the win, each half; plus, with ``format_reward`` w > 0, w times the share of
turns whose reply picked a command (a format reward, for the ``number`` agent: SmolLM2
mostly narrates there, so nearly every game of a group is an all-``look`` loss and GRPO
has nothing to compare; the ``text`` agent picks a command on most turns already, and
there the format reward is a shortcut, paying ``examine ...`` that never advances a quest);
plus, with ``progress_reward`` w > 0, w times the share of the quest done (`Result.progress`,
from the game's own planner): at level 2 the score is the win alone (``max_score`` 1), so
a game that got half-way earns nothing without it. Success (the eval's measure) is
``won`` alone.

TextWorld's command parser is not thread-safe: every environment call of this process
goes through `GAME_LOCK` (the model calls, the slow part, run outside it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import textworld
import textworld.gym
from openai import OpenAI

GAME_LOCK = threading.Lock()
"""Guards every textworld call in this process (its parser keeps global state)."""

SYSTEM = ("You are playing a text adventure game. Your goal: {objective}\n"
          "Each turn, choose one of the numbered commands.")
TURN = "{feedback}\n\nCommands:\n{commands}\nReply with the number of one command."
TEXT_SYSTEM = ("You are playing a text adventure game. Your goal: {objective}\n"
               "Each turn, reply with one of the commands listed, exactly as written.")
TEXT_TURN = ("{feedback}\n\nYour goal: {objective}\nCommands:\n{commands}\n"
             "Reply with one command from the list.")
_STATUS = re.compile(r"\s*>?\s*-=\s*[^=]*=-\s*\d+/\d+\s*$")
_NUMBER = re.compile(r"\d+")
INFOS = textworld.EnvInfos(admissible_commands=True, max_score=True, won=True, lost=True,
                           objective=True, description=True, score=True,
                           policy_commands=True)


@dataclass
class Result:
    """How a game went."""

    won: bool
    score: int
    max_score: int
    steps: int
    commands: list[str] = field(default_factory=list)
    replies: list[str] = field(default_factory=list)
    picked: int = 0
    """Turns whose reply picked a command (the others fell back to ``look``)."""
    format_reward: float = 0.0
    """Weight of the share of picked turns in the reward."""
    progress: float = 0.0
    """The most of the quest done at any turn: 1 - (commands the game's planner still
    needs, ``policy_commands``) / (what it needed at the start); 1 on a win."""
    progress_reward: float = 0.0
    """Weight of `progress` in the reward."""

    @property
    def reward(self) -> float:
        game = (self.score / max(self.max_score, 1) + float(self.won)) / 2
        return (game + self.format_reward * self.picked / max(self.steps, 1)
                + self.progress_reward * self.progress)


def clean(text: str) -> str:
    """A step's text without the padded status line and prompt marker TextWorld appends."""
    return _STATUS.sub("", text).strip()


EXAMPLE = [  # one made-up turn, shown before the game: SmolLM2 narrates without it
    {"role": "user", "content": TEXT_TURN.format(
        feedback="-= Shed =-\nYou are in a shed. There is a box here. On the floor you see "
                 "a key.", objective="Take the key from the floor of the shed.",
        commands="examine box\nlook\ntake key")},
    {"role": "assistant", "content": "take key"},
]


@dataclass(frozen=True)
class Choice:
    """How the agent shows the commands and reads the reply (the module docstring)."""

    system: str
    turn: str
    numbered: bool
    """The listing numbers the commands and a reply's first number picks."""
    example: list[dict[str, str]] = field(default_factory=list)
    """Messages shown between the system message and the game's first turn."""

    def listing(self, commands: list[str]) -> str:
        if self.numbered:
            return "\n".join(f"{i}. {c}" for i, c in enumerate(commands, 1))
        return "\n".join(commands)


CHOICES = {"text": Choice(TEXT_SYSTEM, TEXT_TURN, numbered=False, example=EXAMPLE),
           "number": Choice(SYSTEM, TURN, numbered=True)}


def choose(reply: str, commands: list[str], *, numbered: bool = True) -> str:
    """The command a reply picks, else ``look`` (a spent step; free text never reaches
    the game: the interpreter can hang on some byte sequences a sampling model writes)."""
    return picked(reply, commands, numbered=numbered) or "look"


def picked(reply: str, commands: list[str], *, numbered: bool = True) -> str | None:
    """The command a reply picks, or None when it picks none: with `numbered`, its first
    number (1-based) if in range; then the command it names first, case-insensitively
    (the longest of those that start at the same place: "take glass from cabinet" over
    "take glass")."""
    number = _NUMBER.search(reply) if numbered else None
    if number and 1 <= int(number.group()) <= len(commands):
        return commands[int(number.group()) - 1]
    lowered = reply.lower()
    named = [(lowered.find(c.lower()), -len(c), c) for c in commands if c.lower() in lowered]
    return min(named)[2] if named else None


def open_game(game: str | Path, max_steps: int) -> Any:
    with GAME_LOCK:
        env_id = textworld.gym.register_game(str(game), request_infos=INFOS,
                                             max_episode_steps=max_steps)
        return textworld.gym.make(env_id)


class Game:
    """One game in play: the turns the agent is shown and the reward it earns. The native
    loop (`play`), the OpenEnv form (``openenv_env.TextWorldEnv``) and the verifiers form
    (``vf_textworld``) all play through it, so the three show the same turns and pay the
    same reward; only who calls the model differs."""

    def __init__(self, game: str | Path, *, max_steps: int, choice: str = "number",
                 format_reward: float = 0.0, progress_reward: float = 0.0) -> None:
        self.how, self.max_steps = CHOICES[choice], max_steps
        self.env = open_game(game, max_steps)
        try:
            with GAME_LOCK:
                _, self.infos = self.env.reset()
        except BaseException:
            self.close()
            raise
        # The reset text opens with an ASCII-art banner (~600 tokens): the room
        # description says the same without it.
        self.feedback: str = self.infos["description"]
        self.quest = len(self.infos["policy_commands"])
        self.done = False
        self.result = Result(won=False, score=0, max_score=int(self.infos["max_score"]),
                             steps=0, format_reward=format_reward,
                             progress_reward=progress_reward)

    @property
    def objective(self) -> str:
        return str(self.infos["objective"])

    @property
    def commands(self) -> list[str]:
        """The commands the game accepts now, in the order the agent is shown them."""
        return sorted(self.infos["admissible_commands"])

    @property
    def over(self) -> bool:
        """A win, a loss or `max_steps` commands."""
        return self.done or self.result.steps >= self.max_steps

    def opening(self) -> list[dict[str, str]]:
        """The messages before the first turn: the system message, then the example."""
        return [{"role": "system", "content": self.how.system.format(objective=self.objective)},
                *self.how.example]

    def turn(self) -> str:
        """The user message of the next turn: what the game said, then its commands."""
        return self.how.turn.format(feedback=self.feedback, objective=self.objective,
                                    commands=self.how.listing(self.commands))

    def step(self, reply: str) -> str:
        """Plays the command `reply` picks (else ``look``); returns the command played."""
        result = self.result
        command = picked(reply, self.commands, numbered=self.how.numbered)
        result.picked += command is not None
        command = command or "look"
        with GAME_LOCK:
            text, score, done, self.infos = self.env.step(command)
        self.feedback, self.done = clean(text), bool(done)
        result.steps += 1
        result.score = int(score)
        result.won = bool(self.infos["won"])
        if result.won:
            result.progress = 1.0
        elif self.quest and not self.infos["lost"]:  # a lost game has no plan left either
            result.progress = max(result.progress,
                                  1 - len(self.infos["policy_commands"]) / self.quest)
        result.commands.append(command)
        result.replies.append(reply)
        return command

    def close(self) -> None:
        with GAME_LOCK:
            self.env.close()


def play(game: str | Path, client: OpenAI, model: str, *, max_steps: int = 6,
         temperature: float = 1.0, max_tokens: int = 4, format_reward: float = 0.0,
         progress_reward: float = 0.0, choice: str = "number") -> Result:
    """Plays one game to a win, a loss or `max_steps` commands; `choice` is a key of
    `CHOICES`."""
    played = Game(game, max_steps=max_steps, choice=choice, format_reward=format_reward,
                  progress_reward=progress_reward)
    try:
        messages = played.opening()
        while not played.over:
            messages.append({"role": "user", "content": played.turn()})
            reply = client.chat.completions.create(
                model=model, messages=messages,  # type: ignore[arg-type]
                temperature=temperature, max_tokens=max_tokens,
            ).choices[0].message.content or ""
            messages.append({"role": "assistant", "content": reply})
            played.step(reply)
        return played.result
    finally:
        played.close()


def add_play_args(p: argparse.ArgumentParser) -> None:
    """How `play` replies and is rewarded: this program's options, which ``run.py`` shares."""
    p.add_argument("--choice", choices=sorted(CHOICES), default="number",
                   help="reply with the command itself (text) or its number")
    p.add_argument("--format-reward", type=float, default=0.0, metavar="W",
                   help="add W x the share of turns whose reply picked a command, for "
                        "--choice number (with text it is a shortcut)")
    p.add_argument("--progress-reward", type=float, default=0.0, metavar="W",
                   help="add W x the share of the quest done (the game's own planner)")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--game", required=True, help="a TextWorld game file (.z8, its .json beside)")
    p.add_argument("--max-steps", type=int, default=6)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--max-tokens", type=int, default=4, help="12 suits --choice text")
    add_play_args(p)
    args = p.parse_args(argv)
    client = OpenAI()  # OPENAI_BASE_URL / OPENAI_API_KEY
    result = play(args.game, client, os.environ.get("SWARMRL_MODEL", "smollm2"),
                  max_steps=args.max_steps, temperature=args.temperature,
                  max_tokens=args.max_tokens, format_reward=args.format_reward,
                  progress_reward=args.progress_reward, choice=args.choice)
    if os.environ.get("SWARMRL_REWARD_FILE"):
        Path(os.environ["SWARMRL_REWARD_FILE"]).write_text(json.dumps({"reward": result.reward}))
    print(json.dumps({**asdict(result), "reward": result.reward}))


if __name__ == "__main__":
    main()
