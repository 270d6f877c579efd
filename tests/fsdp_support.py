"""The batch and options of the FSDP2 equivalence tests (tests/server/trainer/test_trainer_fsdp.py, and
tests/server/trainer/test_lora_fsdp.py with LoRA on top): small enough for CPU workers, varied enough to
cross every packing, grammar and mini-batch boundary."""

from __future__ import annotations

import random
from pathlib import Path

from swarmrl_server.timelines.grammar import GrammarReplay
from swarmrl_server.trainer.step import EpisodeRows, episode_rows
from tests.trainer_support import (
    MODEL,
    constrained_call,
    current_logprobs,
    make_episode,
    multi_turn_calls,
)

OPTIONS = {"group_size": "0", "lr": "1e-3", "mini_batches": "2", "micro_batch_tokens": "96",
           "packing": "true", "device": "cpu"}


def fsdp_batch(model_dir: Path) -> list[EpisodeRows]:
    """Eight episodes of 1 to 6 turns (completions of 2 to 40 tokens, one re-rendered
    history, three ending in a grammar-constrained call), on-policy, in two GRPO groups."""
    from swarmrl_server.models import load_model

    model, tokenizer = load_model(model_dir)
    replay = GrammarReplay(tokenizer)
    rng = random.Random(7)
    out = []
    for i, turns in enumerate([1, 6, 2, 5, 1, 3, 4, 1]):
        length = [2, 40, 5, 25, 3, 12, 30, 2][i]
        completions = [[rng.randrange(500, 1500) for _ in range(length - 1)] + [2]
                       for _ in range(turns)]
        calls = current_logprobs(model, multi_turn_calls(
            f"e{i}", rng, turns=turns, completions=completions, split=i == 3))
        if i in (1, 2, 5):  # a structured answer after the last turn, as an agent's last call
            last = calls[-1]
            calls.append(constrained_call(
                model, tokenizer, f"e{i}", len(calls), last.prompt_ids + last.completion_ids,
                f'{{"ok": {"true" if i % 2 else "false"}, "n": {i * 37}}}', temperature=0.8))
        group = f"g{i % 2}"
        record = make_episode(f"e{i}", float(rng.random()), calls, group_id=group)
        out.append(episode_rows(record, MODEL, group, replay.choices)[0])
    assert sum(bool(r.grammars) for e in out for r in e.rows) == 3
    return out
