"""The fruit quiz, played by an agent written with the OpenAI Agents SDK (`openai-agents`).

Nothing here knows about swarmrl. The agent is plain Agents SDK code; the only
configuration is where the model lives, which it reads from the standard
environment variables that `swarmrl run` sets for each episode:

    OPENAI_BASE_URL, OPENAI_API_KEY   the episode's base URL and per-episode key
    SWARMRL_MODEL                     the model name to ask for
    SWARMRL_TASK_ID                   "fruit-quiz/<color>": which question to ask
    SWARMRL_REWARD_FILE               where the episode's reward goes

Every model call the SDK makes lands in the episode with its exact token ids;
the second turn extends the first token for token, so the episode trains as one
sequence. Run it with `python -m examples.openai_agent.play` (see README.md).
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from examples.fruit_quiz.task import COLORS, FruitQuiz


def build_agent() -> Agent:
    # AsyncOpenAI() takes the base URL and key from OPENAI_BASE_URL / OPENAI_API_KEY.
    model = OpenAIChatCompletionsModel(model=os.environ.get("SWARMRL_MODEL", "tiny"),
                                       openai_client=AsyncOpenAI())
    # No instructions and no tools: the quiz's format is a bare question (what the demo's
    # warm start taught the tiny model). Temperature 1 keeps the samples on-policy.
    return Agent(name="fruit-quiz", model=model,
                 model_settings=ModelSettings(temperature=1.0, max_tokens=4))


async def main() -> None:
    set_tracing_disabled(True)  # traces would go to api.openai.com, which is not ours
    task = os.environ.get("SWARMRL_TASK_ID", "")
    color = task.rpartition("/")[2] if task.rpartition("/")[2] in COLORS else \
        random.choice(COLORS)
    quiz = FruitQuiz(color)
    agent = build_agent()
    history: list = []
    while not quiz.done:
        # Multi-turn the Agents SDK way: the last run's items plus the new user turn.
        history.append(quiz.messages[-1])
        result = await Runner.run(agent, history)
        answer = str(result.final_output)
        history = result.to_input_list()
        quiz.answer({"role": "assistant", "content": answer})
    reward_file = os.environ.get("SWARMRL_REWARD_FILE")
    if reward_file:
        Path(reward_file).write_text(str(quiz.reward))
    print(f"{quiz.task_id}: answers {[m['content'] for m in quiz.messages[1::2]]} "
          f"reward {quiz.reward}")


if __name__ == "__main__":
    asyncio.run(main())
