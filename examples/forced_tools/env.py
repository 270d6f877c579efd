"""Forced tool calls and a structured answer: a plain OpenAI Agents SDK agent, trained exactly.

    swarmrl eval examples.forced_tools.env:ForcedTools --model smollm2 --split val  # README.md

**The agent** is ordinary Agents SDK code (`agents.Agent`, `OpenAIChatCompletionsModel`
over ``rollout.openai()``): deterministic ``@function_tool`` s, ``ModelSettings(
tool_choice="required")`` and ``output_type=Answer`` (a pydantic model). The SDK sends
both on every turn; the server decodes the first turn as a forced tool call (under the
grammar of the tools' schemas) and, once the SDK has reset its tool choice after the
call, the second turn as the JSON of ``Answer``. Both calls are recorded with their
grammar; the trainer trains the choices the grammars left (which tool, its arguments,
the answer's text), unless ``constrained_calls=context``.

**Tasks** (one per tool, `TASKS`; ``tasks=`` picks them, and the tools the agent has):
``add`` ("What is 37 plus 85?"), ``price`` ("What does item K-482 cost?": a lookup in a
made-up price list), ``convert`` ("How many minutes are in 7 hours?"). SmolLM2's chat
template shows no tools, so the instructions list them. Reward: 0.25 for the right tool,
0.25 more with the right arguments, 0.5 for the right final answer; success: all of it.

**Splits** from disjoint seeds: test ``TEST_SEED``, val ``VAL_SEED`` (without test's
questions), train endless from ``TRAIN_SEED + seed`` (the runner skips a held-out
question, checked on content: the question's text). ``test_seed=S`` (an env arg,
recorded in ``describe()``'s seeds) draws a fresh test set from ``S``, without val's
questions and without the earlier test set's (which chose configurations before); val
stays as it was, computed against the earlier test set. The default is ``TEST_SEED``.
"""

from __future__ import annotations

import itertools
import random
import zlib
from collections.abc import Iterator
from typing import Any, Literal

from agents import (
    Agent,
    AgentsException,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from pydantic import BaseModel

from swarmrl.envs import Environment, Item, Outcome, Rollout, Split

TEST_SEED, VAL_SEED, TRAIN_SEED = 7_001, 7_002, 1_000_000
Unit = Literal["km", "m", "cm", "kg", "g", "hours", "minutes", "seconds"]
FACTORS = {("km", "m"): 1000, ("m", "cm"): 100, ("km", "cm"): 100_000, ("kg", "g"): 1000,
           ("hours", "minutes"): 60, ("minutes", "seconds"): 60, ("hours", "seconds"): 3600}


class Answer(BaseModel):
    answer: int
    """The final answer (every task's answer is a whole number)."""


def item_price(code: str) -> int:
    """The made-up price list: a deterministic price for every item code."""
    return 5 + zlib.crc32(code.strip().upper().encode()) % 95


def convert_value(value: float, from_unit: str, to_unit: str) -> float | None:
    if (from_unit, to_unit) in FACTORS:
        return value * FACTORS[from_unit, to_unit]
    back = FACTORS.get((to_unit, from_unit))
    return value / back if back else None


def _log(ctx: RunContextWrapper[list[Any]], name: str, **args: Any) -> None:
    ctx.context.append((name, args))  # the rollout's tool calls, for the reward


# failure_error_function=None: arguments that do not parse (a call cut off by max_tokens)
# raise, which ends the run with reward 0, rather than going back to the model and the
# server (which refuses a turn that holds a tool call's broken arguments).
@function_tool(failure_error_function=None)
def add(ctx: RunContextWrapper[list[Any]], a: int, b: int) -> str:
    """Adds two whole numbers."""
    _log(ctx, "add", a=a, b=b)
    return str(a + b)


@function_tool(failure_error_function=None)
def price(ctx: RunContextWrapper[list[Any]], code: str) -> str:
    """The price in dollars of the item with this code (like K-482)."""
    _log(ctx, "price", code=code.strip().upper())
    return str(item_price(code))


@function_tool(failure_error_function=None)
def convert(ctx: RunContextWrapper[list[Any]], value: float, from_unit: Unit,
            to_unit: Unit) -> str:
    """Converts a quantity from one unit to another."""
    _log(ctx, "convert", value=value, from_unit=from_unit, to_unit=to_unit)
    out = convert_value(value, from_unit, to_unit)
    return "no such conversion" if out is None else f"{out:.10g}"


TOOLS = {"add": add, "price": price, "convert": convert}  # task -> its tool
LISTED = {"add": "add(a, b): adds two numbers", "price": "price(code): the price of an item",
          "convert": "convert(value, from_unit, to_unit): converts units"}
INSTRUCTIONS = ("Answer the question with a tool. Tools:\n{tools}\n"
                "Then give the tool's result as the answer.")


def make_question(task: str, rng: random.Random) -> dict[str, Any]:
    """One question of `task`: its text, the expected call and the answer."""
    if task == "add":
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return {"question": f"What is {a} plus {b}?", "call": ["add", {"a": a, "b": b}],
                "answer": str(a + b)}
    if task == "price":
        code = f"{rng.choice('ABCDEFGHJKLMNPRSTUVWXYZ')}-{rng.randint(100, 999)}"
        return {"question": f"What does item {code} cost?", "call": ["price", {"code": code}],
                "answer": str(item_price(code))}
    (src, dst), value = rng.choice(list(FACTORS)), rng.randint(2, 99)
    return {"question": f"How many {dst} are in {value} {src}?",
            "call": ["convert", {"value": value, "from_unit": src, "to_unit": dst}],
            "answer": f"{convert_value(value, src, dst):.10g}"}


def same(got: str, want: str) -> bool:
    got = got.strip().strip("$").strip()
    try:
        return float(got) == float(want)
    except ValueError:
        return got.lower() == want.lower()


class ForcedTools(Environment):
    """Questions of `tasks` (comma-separated, from `TASKS`), answered with those tools."""

    name = "forced-tools"

    def __init__(self, tasks: str = "add,price,convert", val_size: int = 30,
                 test_size: int = 60, seed: int = 0, max_tokens: int = 96,
                 test_seed: int = TEST_SEED) -> None:
        self.tasks = tasks.split(",")
        if unknown := set(self.tasks) - set(TOOLS):
            raise ValueError(f"tasks: unknown {sorted(unknown)} (known: {', '.join(TOOLS)})")
        self.sizes = {"val": val_size, "test": test_size}
        self.seed, self.max_tokens, self.test_seed = seed, max_tokens, test_seed
        set_tracing_disabled(True)  # traces would go to api.openai.com

    def describe(self) -> dict[str, Any]:
        return {"tasks": self.tasks, "sizes": self.sizes, "seed": self.seed, "seeds": [
            self.test_seed, VAL_SEED, TRAIN_SEED], "max_tokens": self.max_tokens,
            "instructions": self._instructions()}

    def _instructions(self) -> str:
        return INSTRUCTIONS.format(tools="\n".join(LISTED[t] for t in self.tasks))

    def _stream(self, split: str, seed: int) -> Iterator[Item]:
        rng = random.Random(seed)
        for i in itertools.count():
            task = self.tasks[i % len(self.tasks)]
            q = make_question(task, rng)
            yield Item(f"{split}/{i}", q, task=task, content=q["question"])

    def _held_out(self, split: str, seed: int, size: int, taken: set[str]) -> list[Item]:
        fresh = (i for i in self._stream(split, seed) if i.content not in taken)
        return list(itertools.islice(fresh, size))

    def items(self, split: Split) -> list[Item] | Iterator[Item]:
        if split == "train":
            return self._stream(split, TRAIN_SEED + self.seed)
        earlier = self._held_out("test", TEST_SEED, self.sizes["test"], set())
        if split == "test" and self.test_seed == TEST_SEED:
            return earlier
        taken = {str(i.content) for i in earlier}
        val = self._held_out("val", VAL_SEED, self.sizes["val"], taken)
        if split == "val":
            return val
        return self._held_out("test", self.test_seed, self.sizes["test"],
                              taken | {str(i.content) for i in val})

    async def play(self, rollout: Rollout) -> Outcome:
        q, s = rollout.item.data, rollout.sampling
        agent = Agent[list[Any]](
            name="forced-tools", instructions=self._instructions(),
            tools=[TOOLS[t] for t in self.tasks], output_type=Answer,
            model=OpenAIChatCompletionsModel(model=rollout.model,
                                             openai_client=rollout.openai(max_retries=0)),
            model_settings=ModelSettings(tool_choice="required", temperature=s.temperature,
                                         top_p=s.top_p, max_tokens=s.max_tokens or self.max_tokens))
        calls: list[Any] = []  # the tools log their calls here
        answer, error = "", ""
        try:
            result = await Runner.run(agent, q["question"], context=calls, max_turns=3)
            answer = str(result.final_output.answer)
        except AgentsException as e:  # the model's doing (a cut-off answer): a failure as data
            error = f"{type(e).__name__}: {e}"
        want_name, want_args = q["call"]
        name_ok = bool(calls) and calls[0][0] == want_name
        tool_ok = name_ok and all(same(str(calls[0][1].get(k)), str(v))
                                  for k, v in want_args.items())
        answer_ok = same(answer, q["answer"])
        return Outcome(reward=0.25 * name_ok + 0.25 * tool_ok + 0.5 * answer_ok,
                       success=tool_ok and answer_ok,
                       metrics={"name_ok": float(name_ok), "tool_ok": float(tool_ok),
                                "answer_ok": float(answer_ok)},
                       info={"calls": calls, "answer": answer, "want": q["answer"],
                             "error": error})
