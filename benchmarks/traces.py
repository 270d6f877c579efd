"""Synthetic agent traces shaped like AppWorld runs, as the swarm server records them.

An AppWorld episode is a ReAct loop: a system prompt with the API docs and rules
plus the task (≈1.5k tokens), then 20-40 turns of (action = Python code the model
writes, observation = the API's output). Every turn is one LLM call whose prompt is
the whole history so far, rendered in ChatML; its completion ends with <|im_end|>.

Shape (defaults; every one is a command-line flag of `timeline_merge.py`):

- system + task prompt: `prompt_tokens` = 1500 (of which `system_tokens` = 1200 are
  the same for every task: docs and rules; the rest is the task),
- turns: uniform integer in [20, 40],
- action (completion) length: lognormal, median 90 tokens, sigma 0.6, clipped to
  [8, 512] (mean ≈ 108),
- observation length: lognormal, median 180 tokens, sigma 0.8, clipped to [16, 1500]
  (mean ≈ 245),
- ChatML framing: 3 tokens per header, 2 after each message; a turn adds ≈ 365
  tokens, so a 30-turn episode ends near 12.5k tokens of context,
- `max_context` = 18000 (the seed system's max_model_len): an episode whose next
  prompt would not leave room for a longest action stops there, as on overflow.

Fork-heavy variant (`fork_heavy()`): the same episodes plus
- context compaction every `compact_every` = 8 turns: a summarisation call (prompt =
  history + instruction) whose completion (lognormal, median 300 tokens) replaces the
  history: the next prompt is system + task + summary — a fork after the task prompt,
- retried calls with probability `retry_p` = 0.15 per turn: the call is sent again
  with the same prompt; the failed attempt is dropped from the history — a fork at
  the end of that prompt,
- GRPO groups of `group_size` = 6 episodes per task that share the system + task
  prompt and diverge at their first sampled token.

Token ids are random content ids (no text: merging never looks at text); the call
records carry random logprobs and a fixed policy version and temperature.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from swarmrl_server.store.records import CallRecord

# Special ids of the synthetic vocabulary; content ids are drawn from [16, vocab).
IM_START, IM_END, NL, SYSTEM, USER, ASSISTANT, TOOL = 1, 2, 3, 4, 5, 6, 7
FIRST_CONTENT_ID = 16
SUMMARY_MAX = 1024


@dataclass(frozen=True)
class TraceShape:
    """Distribution of the generated episodes (see the module docstring)."""

    prompt_tokens: int = 1500
    system_tokens: int = 1200
    turns_min: int = 20
    turns_max: int = 40
    act_median: float = 90.0
    act_sigma: float = 0.6
    act_min: int = 8
    act_max: int = 512
    obs_median: float = 180.0
    obs_sigma: float = 0.8
    obs_min: int = 16
    obs_max: int = 1500
    max_context: int = 18000
    compact_every: int = 0
    """Summarise and restart the history after every k turns (0: never)."""
    summary_median: float = 300.0
    summary_sigma: float = 0.4
    compact_instruction_tokens: int = 40
    retry_p: float = 0.0
    """Probability that a turn's call is sent twice (the first attempt discarded)."""
    group_size: int = 1
    """Episodes per task (a GRPO group) sharing the system + task prompt."""
    temperature: float = 1.0
    vocab: int = 2048


def appworld() -> TraceShape:
    """Linear ReAct episodes: one timeline each."""
    return TraceShape()


def fork_heavy() -> TraceShape:
    """Compaction every 8 turns, 15 % retried calls, GRPO groups of 6."""
    return TraceShape(compact_every=8, retry_p=0.15, group_size=6)


@dataclass
class Episode:
    episode_id: str
    task_id: str
    calls: list[CallRecord]


class _Gen:
    def __init__(self, shape: TraceShape, rng: random.Random) -> None:
        self.shape = shape
        self.rng = rng

    def content(self, n: int) -> list[int]:
        return [self.rng.randrange(FIRST_CONTENT_ID, self.shape.vocab) for _ in range(n)]

    def length(self, median: float, sigma: float, lo: int, hi: int) -> int:
        return max(lo, min(hi, round(self.rng.lognormvariate(math.log(median), sigma))))

    def message(self, role: int, n: int, ids: list[int] | None = None) -> list[int]:
        body = ids if ids is not None else self.content(n)
        return [IM_START, role, NL, *body, IM_END, NL]


def _call(ep: Episode, prompt: list[int], completion: list[int], g: _Gen) -> None:
    ep.calls.append(CallRecord(
        call_id=f"{ep.episode_id}-c{len(ep.calls)}",
        episode_id=ep.episode_id,
        seq=len(ep.calls),
        model="policy",
        prompt_ids=list(prompt),
        completion_ids=completion,
        logprobs=[-g.rng.expovariate(2.0) for _ in completion],
        policy_version=0,
        finish_reason="stop",
        temperature=g.shape.temperature,
        text="",
    ))


def _episode(ep: Episode, head: list[int], g: _Gen) -> None:
    s = g.shape
    asst = [IM_START, ASSISTANT, NL]
    history = list(head)
    turns = g.rng.randint(s.turns_min, s.turns_max)
    for turn in range(turns):
        if s.compact_every and turn and turn % s.compact_every == 0:
            prompt = history + g.message(USER, s.compact_instruction_tokens) + asst
            if len(prompt) + SUMMARY_MAX > s.max_context:
                return
            summary = g.content(g.length(s.summary_median, s.summary_sigma, 16, SUMMARY_MAX - 1))
            _call(ep, prompt, summary + [IM_END], g)
            history = list(head) + g.message(USER, 0, summary)
        prompt = history + asst
        if len(prompt) + s.act_max > s.max_context:
            return  # context overflow: the episode ends here
        if s.retry_p and g.rng.random() < s.retry_p:
            failed = g.content(g.length(s.act_median, s.act_sigma, s.act_min, s.act_max))
            _call(ep, prompt, failed + [IM_END], g)
        action = g.content(g.length(s.act_median, s.act_sigma, s.act_min, s.act_max))
        _call(ep, prompt, action + [IM_END], g)
        observation = g.length(s.obs_median, s.obs_sigma, s.obs_min, s.obs_max)
        history = prompt + action + [IM_END, NL] + g.message(TOOL, observation)


def make_episodes(shape: TraceShape, tasks: int, seed: int = 0) -> list[Episode]:
    """`tasks` x `group_size` episodes; episodes of one task share its prompt."""
    rng = random.Random(seed)
    g = _Gen(shape, rng)
    framing = 12  # two ChatML messages: 3 header + 2 trailer tokens each, and slack
    system = g.content(shape.system_tokens - 5)
    episodes: list[Episode] = []
    for task in range(tasks):
        task_body = g.content(max(1, shape.prompt_tokens - shape.system_tokens - framing + 5))
        head = g.message(SYSTEM, 0, system) + g.message(USER, 0, task_body)
        for member in range(shape.group_size):
            ep = Episode(f"task{task}-ep{member}", f"task{task}", [])
            _episode(ep, head, g)
            episodes.append(ep)
    return episodes


def with_overrides(shape: TraceShape, **values: object) -> TraceShape:
    """`shape` with the given fields replaced (None values are ignored)."""
    return replace(shape, **{k: v for k, v in values.items() if v is not None})
