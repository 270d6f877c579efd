"""Helpers for the trainer tests: synthetic episodes with exact token ids, stores of them,
and a swarm (no front doors) with a trainer attached."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from swarmrl_server.store.records import CallRecord, EpisodeRecord, EpisodeState
from swarmrl_server.store.sqlite import SqliteStore
from swarmrl_server.trainer.step import EpisodeRows, episode_rows

if TYPE_CHECKING:
    from swarmrl_server.swarm import Swarm

MODEL = "tiny"
PROMPT = [1, 873, 198, 1100, 1200, 30, 2, 198, 1, 1300, 198]
"""A ChatML-ish prompt of the tiny vocabulary (ids only; nothing re-tokenizes them)."""


def make_call(
    episode_id: str, seq: int, prompt: list[int], completion: list[int], *,
    logprobs: list[float] | None = None, version: int = 0, temperature: float = 1.0,
    model: str = MODEL,
) -> CallRecord:
    return CallRecord(
        call_id=f"{episode_id}-c{seq}", episode_id=episode_id, seq=seq, model=model,
        prompt_ids=list(prompt), completion_ids=list(completion),
        logprobs=list(logprobs) if logprobs is not None else [-1.0] * len(completion),
        policy_version=version, finish_reason="stop", temperature=temperature, text="",
    )


ANSWER_SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
                 "required": ["ok", "n"]}


def constrained_call(model: Any, tokenizer: Any, episode_id: str, seq: int, prompt: list[int],
                     text: str, *, temperature: float = 1.0) -> CallRecord:
    """A call decoded under a JSON-schema grammar (`ANSWER_SCHEMA`): `text`, then the end of
    turn, recorded with its grammar and the model's own masked logprobs (on-policy)."""
    from swarmrl_server.engine.grammar import grammar_json, json_schema_tag
    from swarmrl_server.engine.text import end_of_turn_ids
    from swarmrl_server.timelines.grammar import GrammarReplay
    from swarmrl_server.timelines.logprobs import forward_timelines
    from swarmrl_server.timelines.merge import merge_calls

    stops = end_of_turn_ids(tokenizer)
    completion = list(tokenizer(text, add_special_tokens=False)["input_ids"]) + [stops[0]]
    call = make_call(episode_id, seq, prompt, completion, temperature=temperature)
    call.constrained = True
    call.grammar = grammar_json(json_schema_tag(ANSWER_SCHEMA), stops,
                                int(model.get_input_embeddings().num_embeddings))
    replay = GrammarReplay(tokenizer)
    assert replay.replay(call.grammar, completion).accepted == len(completion), text
    (row,), _ = merge_calls([call], replay.choices)
    with torch.no_grad():
        (lp,), _ = forward_timelines(model, [row], masks=replay.row_masks([row]))
    call.logprobs = [float(lp[len(prompt) + j - 1]) for j in range(len(completion))]
    return call


def make_episode(
    episode_id: str, reward: float, calls: list[CallRecord], *, task_id: str = "t",
    group_id: str = "g", end_time: float | None = None, models: list[str] | None = None,
) -> EpisodeRecord:
    return EpisodeRecord(
        episode_id=episode_id, session_id="s", task_id=task_id, group_id=group_id,
        agent_version="", models=models or [MODEL], labels={}, state=EpisodeState.ENDED,
        start_time=0.0, reward=reward, end_time=end_time, calls=calls,
    )


def multi_turn_calls(
    episode_id: str, rng: random.Random, *, turns: int = 3, version: int = 0, split: bool = False,
    completions: list[list[int]] | None = None,
) -> list[CallRecord]:
    """A multi-turn episode: each call's prompt extends the previous prompt + completion
    (so merging gives one row), unless `split`, where each call re-renders a different
    first token (so every call is its own row) — with the same generated tokens."""
    calls = []
    context = list(PROMPT)
    for t in range(turns):
        completion = completions[t] if completions else [rng.randrange(500, 1500), 2]
        prompt = list(context)
        if split and t > 0:
            prompt[0] = 100 + t  # the history was "re-rendered": no longer a token prefix
        calls.append(make_call(episode_id, t, prompt, completion, version=version))
        context = context + completion + [198, 1, 1300 + t, 198]
    return calls


def current_logprobs(model: Any, calls: list[CallRecord]) -> list[CallRecord]:
    """Sets each call's recorded logprobs to the model's own (ratio 1, as on-policy)."""
    with torch.no_grad():
        for c in calls:
            ids = torch.tensor([c.prompt_ids + c.completion_ids])
            logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
            n = len(c.prompt_ids)
            c.logprobs = [float(logp[n - 1 + i, t]) for i, t in enumerate(c.completion_ids)]
    return calls


async def insert_episodes(store: SqliteStore, episodes: list[EpisodeRecord]) -> None:
    """Writes ended episodes (with their calls) as the server would have."""
    for e in episodes:
        e.state = EpisodeState.OPEN
        await store.create_episode(e)
        for c in e.calls:
            await store.add_call(c)
        await store.finish_episode(e.episode_id, EpisodeState.ENDED, reward=e.reward,
                                   request_id="",
                                   end_time=e.end_time if e.end_time is not None else time.time())
        e.state = EpisodeState.ENDED


def write_episodes(db: Path, episodes: list[EpisodeRecord]) -> None:
    """`insert_episodes` into the SQLite file of a data dir (no server running)."""
    async def run() -> None:
        store = SqliteStore(db)
        await store.open()
        try:
            await insert_episodes(store, episodes)
        finally:
            await store.close()

    asyncio.run(run())


def group_of(prefix: str, rewards: list[float], *, group_id: str, t0: float, seed: int = 0,
             version: int = 0, task_id: str = "t") -> list[EpisodeRecord]:
    """A group of 2-turn episodes with the given rewards, ending at t0, t0+1, ..."""
    rng = random.Random(seed)
    return [
        make_episode(f"{prefix}{i}", r, multi_turn_calls(f"{prefix}{i}", rng, turns=2, version=version),
                     group_id=group_id, task_id=task_id, end_time=t0 + i)
        for i, r in enumerate(rewards)
    ]


def per_call_rows(calls: list[CallRecord]) -> list[Any]:
    """One row per call (no merging), each the call's full prompt + completion."""
    from swarmrl_server.timelines.merge import merge_calls

    return [merge_calls([c])[0][0] for c in calls]


def fresh_model(tiny_model_dir: Path) -> torch.nn.Module:
    from swarmrl_server.models import load_model

    model, _ = load_model(tiny_model_dir)
    return model


def two_episode_group(model: torch.nn.Module) -> tuple[EpisodeRows, EpisodeRows]:
    """A good (reward 1) and a bad (reward 0) 3-turn episode, on-policy for `model`."""
    rng = random.Random(0)
    good = make_episode("good", 1.0, current_logprobs(model, multi_turn_calls("good", rng)))
    bad = make_episode("bad", 0.0, current_logprobs(model, multi_turn_calls("bad", rng)))
    return episode_rows(good, MODEL, "g")[0], episode_rows(bad, MODEL, "g")[0]


# -- a swarm with a trainer, no front doors ---------------------------------------------
# (The server's modules are imported when used: the FSDP tests' spawned workers import
# this module for the episodes alone.)


async def open_swarm(data_dir: Path, model_dir: Path) -> Swarm:
    from swarmrl_server.engine.hf.engine import HFEngine
    from swarmrl_server.hosting import ModelHost
    from swarmrl_server.swarm import Swarm

    engine = HFEngine.from_pretrained(MODEL, model_dir)
    swarm = Swarm({MODEL: ModelHost(MODEL, engine, "tiny", model_dir, trainable=True)},
                  data_dir=data_dir)
    await swarm.start()
    return swarm


async def train(swarm: Swarm, resume: Path | None = None, **options: str) -> Any:
    """Attaches a trainer of MODEL to `swarm` (one group of 2 a step unless `options` say
    otherwise) and returns it."""
    from swarmrl_server.config import ModelSpec, ServerConfig
    from swarmrl_server.wiring import attach_trainers

    options = {"progress": "false", "group_size": "2", "batch_rule": "groups", "batch_size": "1",
               "lr": "1e-3", **options}
    config = ServerConfig(models=(ModelSpec(MODEL, "tiny"),), train=True, train_options=options,
                          resume=resume, data_dir=swarm.data_dir)
    await attach_trainers(swarm, config)
    return swarm.models[MODEL].trainer


def metrics(data_dir: Path) -> list[dict[str, Any]]:
    """Every step's metrics record (metrics.jsonl)."""
    return [json.loads(line) for line in (data_dir / "metrics.jsonl").read_text().splitlines()]
