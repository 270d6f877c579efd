"""OpenEnv environments written as their authors would (OpenEnv's own base classes, served
by OpenEnv's own server), for the adapter's tests (`tests/sdk/envs/test_envs_openenv.py`).

- `WordGuess`: a text game. Guess a five-letter word in three tries; each guess earns
  a tenth per letter of the word it contains, and 1.0 when it is the word. Every step
  is appended to a JSONL log (``log=PATH``) under the episode id the adapter passed to
  ``reset``, so a test can sum the game's own rewards per swarmrl episode.
- `WeatherDesk`: a tool (MCP) environment. Which of three cities is warmest today?
  ``get_weather(city)`` reads a city's temperature; ``submit(city)`` answers, and the
  environment's ``step`` sets reward and done on that tool result (an MCP tool result
  has neither by itself). Every tool call is recorded in `WeatherDesk.calls`.
- `Riddle`: a question game whose ``reset(seed)`` maps many seeds to one of four
  questions, stated in the reset observation: seed ranges that look disjoint share
  problems, which only a check on the observation sees.
"""

from __future__ import annotations

import json
import random
import threading
from typing import Any, ClassVar, Literal

from fastmcp import FastMCP
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction
from openenv.core.env_server.types import Action, Observation, State

WORDS = ("apple", "brick", "cloud", "dance", "eagle", "flame", "grape", "house")
CITIES = ("Paris", "Seoul", "Lima")
_log_lock = threading.Lock()


class GuessAction(Action):
    guess: str


class GuessObservation(Observation):
    message: str = ""
    hits: int = 0


class WordGuess(Environment[GuessAction, GuessObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, log: str | None = None, tries: int = 3) -> None:
        super().__init__()
        self.log, self.tries = log, tries
        self._state = State()
        self._word = ""
        self._seed: int | None = None

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: Any) -> GuessObservation:
        self._seed = seed
        self._word = WORDS[(seed or 0) % len(WORDS)]
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(message=f"Guess my {len(self._word)}-letter word. "
                                        "Reply with one word.")

    def step(self, action: GuessAction, timeout_s: float | None = None,
             **kwargs: Any) -> GuessObservation:
        self._state.step_count += 1
        guess = action.guess.strip().lower()
        hits = sum(1 for c in set(self._word) if c in guess)
        won = guess == self._word
        reward = 1.0 if won else round(hits / 10, 3)
        done = won or self._state.step_count >= self.tries
        if self.log:
            with _log_lock, open(self.log, "a") as f:
                f.write(json.dumps({"episode_id": self._state.episode_id, "seed": self._seed,
                                    "guess": action.guess, "reward": reward,
                                    "done": done}) + "\n")
        return GuessObservation(message=f"{hits} of its letters are in {guess!r}. Again.",
                                hits=hits, reward=reward, done=done)

    @property
    def state(self) -> State:
        return self._state


class DeskObservation(Observation):
    prompt: str = ""


City = Literal["Paris", "Seoul", "Lima"]


class WeatherDesk(MCPEnvironment):
    calls: ClassVar[list[dict[str, Any]]] = []
    """Every tool call any session received: episode, tool, arguments, result."""

    def __init__(self) -> None:
        mcp = FastMCP("weather-desk")
        self._temps: dict[str, int] = {}
        self._state = State()

        @mcp.tool
        def get_weather(city: City) -> str:
            """Today's temperature in a city."""
            result = f"{city}: {self._temps[city]} degrees (report {self._report})"
            self._record("get_weather", {"city": city}, result)
            return result

        @mcp.tool
        def submit(city: City) -> str:
            """Answer with the warmest city; ends the task."""
            self._record("submit", {"city": city}, self.warmest)
            return f"submitted {city}"

        super().__init__(mcp)

    def _record(self, tool: str, arguments: dict[str, Any], result: str) -> None:
        self.calls.append({"episode_id": self._state.episode_id, "tool": tool,
                           "arguments": arguments, "result": result})

    @property
    def warmest(self) -> str:
        return max(self._temps, key=lambda c: self._temps[c])

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: Any) -> DeskObservation:
        rng = random.Random(seed)
        self._temps = dict(zip(CITIES, rng.sample(range(-5, 35), len(CITIES))))
        self._report = f"r{seed}-{rng.randrange(10**6)}"
        self._state = State(episode_id=episode_id, step_count=0)
        return DeskObservation(prompt="Which city is warmest today: Paris, Seoul or Lima? "
                                      "Use get_weather, then submit.")

    async def step_async(self, action: Action, timeout_s: float | None = None,
                         **kwargs: Any) -> Observation:
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        self._state.step_count += 1
        if isinstance(action, CallToolAction) and action.tool_name == "submit":
            observation.done = True
            observation.reward = float(action.arguments.get("city") == self.warmest)
        return observation

    def _step_impl(self, action: Action, timeout_s: float | None = None,
                   **kwargs: Any) -> Observation:
        return Observation(metadata={"error": f"unknown action {type(action).__name__}"})

    @property
    def state(self) -> State:
        return self._state


QUESTIONS = ("What has keys but no locks?", "What has a neck but no head?",
             "What gets wetter as it dries?", "What has hands but cannot clap?")


class RiddleAction(Action):
    answer: str


class RiddleObservation(Observation):
    question: str = ""


class Riddle(Environment[RiddleAction, RiddleObservation, State]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: Any) -> RiddleObservation:
        self._state = State(episode_id=episode_id, step_count=0)
        return RiddleObservation(question=QUESTIONS[(seed or 0) % len(QUESTIONS)])

    def step(self, action: RiddleAction, timeout_s: float | None = None,
             **kwargs: Any) -> RiddleObservation:
        self._state.step_count += 1
        return RiddleObservation(reward=0.0, done=True)

    @property
    def state(self) -> State:
        return self._state
