"""Trainer step time with and without grammar masks, on a constrained-heavy batch, side by
side in one run.

Every call of the batch is a forced tool call or a JSON answer (the calls a framework
with `tool_choice="required"` and a structured final answer makes): `--groups` GRPO groups
of 8 episodes, `--turns` forced tool calls each (city, day count and a free-text note as
arguments) with a tool result after each, then one JSON answer. The same calls train
three ways through the trainer's own `StepRunner`, in turn, `--steps` times each
(median; the learning rate is 0, so every step sees the same weights):

- unmasked: the calls as if decoded freely: every completion token trained, no mask
  (what the step would cost if grammars were free);
- masked: `constrained_calls=mask` as the in-process trainer runs it: rows merged with
  the grammar's choices (forced tokens out of the loss), the forward masking its logits;
  the masks come from the replay cache the merge filled;
- masked-cold: the same with the replay cache emptied before each step, as a Ray / FSDP2
  worker that replays the rows it receives.

The merge's own replay (the controller's, once per batch) is timed apart.

    python benchmarks/constrained_step.py --model tiny --groups 2 --steps 3
    python benchmarks/constrained_step.py --model smollm2 --groups 1 --steps 2
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "note": {"type": "string"}},
    "required": ["city", "days", "note"]}
ANSWER = {"type": "object", "properties": {"answer": {"type": "string"},
                                           "confident": {"type": "boolean"}},
          "required": ["answer", "confident"]}
CITIES = ["Paris", "Seoul", "Lima", "Nairobi", "Oslo", "Hanoi", "Quito", "Perth"]
WORDS = "rain sun wind snow warm cold dry humid cloudy clear storm mild".split()


def _episodes(tokenizer: Any, vocab: int, groups: int, turns: int, seed: int = 0) -> list[Any]:
    """EpisodeRecords of forced tool calls and a JSON answer (ids from real text, so every
    completion is one the grammar accepts)."""
    from swarmrl_server.engine.grammar import grammar_json, json_schema_tag, tool_call_tag
    from swarmrl_server.engine.text import end_of_turn_ids
    from swarmrl_server.episodes.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
    from tests.trainer_support import make_call, make_episode

    rng = random.Random(seed)
    stops = end_of_turn_ids(tokenizer)
    tool = grammar_json(tool_call_tag([("get_weather", WEATHER)], TOOL_CALL_OPEN,
                                      TOOL_CALL_CLOSE), stops, vocab)
    answer = grammar_json(json_schema_tag(ANSWER), stops, vocab)

    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    system = ids("<|im_start|>system\nYou plan trips. Call get_weather for every city, "
                 "then answer in JSON.<|im_end|>\n")
    out = []
    for g in range(groups):
        question = ids(f"<|im_start|>user\nPlan a trip through {', '.join(rng.sample(CITIES, 3))}"
                       f".<|im_end|>\n<|im_start|>assistant\n")
        for k in range(8):
            eid = f"g{g}e{k}"
            prompt, calls = system + question, []
            for t in range(turns + 1):
                if t < turns:
                    args = {"city": rng.choice(CITIES), "days": rng.randrange(1, 15),
                            "note": " ".join(rng.choices(WORDS, k=rng.randrange(2, 8)))}
                    text = (f'{TOOL_CALL_OPEN}\n{{"name": "get_weather", "arguments": '
                            f'{json.dumps(args)}}}\n{TOOL_CALL_CLOSE}')
                    grammar = tool
                else:
                    text = json.dumps({"answer": " ".join(rng.choices(WORDS, k=12)),
                                       "confident": rng.random() < 0.5})
                    grammar = answer
                completion = ids(text) + [stops[0]]
                call = make_call(eid, t, prompt, completion, temperature=0.7, model="m")
                call.logprobs = [-0.5] * len(completion)
                call.constrained, call.grammar = True, grammar
                calls.append(call)
                prompt = prompt + completion + ids(
                    f"\n<|im_start|>tool\n{' '.join(rng.choices(WORDS, k=20))}<|im_end|>\n"
                    "<|im_start|>assistant\n")
            out.append(make_episode(eid, float(rng.random() < 0.5), calls, group_id=f"g{g}",
                                    models=["m"]))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--groups", type=int, default=2, help="GRPO groups of 8 episodes")
    p.add_argument("--turns", type=int, default=3, help="forced tool calls per episode")
    p.add_argument("--steps", type=int, default=3, help="timed steps per mode")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    args = p.parse_args(argv)
    from swarmrl_server.models import resolve_model
    from swarmrl_server.timelines.grammar import GrammarReplay
    from swarmrl_server.trainer.config import TrainerConfig
    from swarmrl_server.trainer.device import Placement
    from swarmrl_server.trainer.setup import build_optimizer, build_policy
    from swarmrl_server.trainer.step import StepRunner, episode_rows

    torch.set_num_threads(args.threads)
    path = resolve_model(args.model)
    config = TrainerConfig.from_options({"device": "cpu", "progress": "false",
                                         "group_size": "8"})
    placement = Placement.for_option(config.device, bf16=config.bf16)
    policy = build_policy(path, config, placement)
    replay = GrammarReplay.for_model(path)
    vocab = int(policy.model.get_input_embeddings().num_embeddings)
    records = _episodes(replay.tokenizer, vocab, args.groups, args.turns)

    t0 = time.perf_counter()
    masked = [episode_rows(r, "m", r.group_id, replay.choices)[0] for r in records]
    merge_replay_s = time.perf_counter() - t0
    for r in records:
        for c in r.calls:
            c.constrained, c.grammar = False, ""
    unmasked = [episode_rows(r, "m", r.group_id)[0] for r in records]
    optimizer = build_optimizer(policy.model, config)
    runner = StepRunner(policy.model, optimizer, config,
                        pad_id=policy.pad_id, placement=placement, grammar=replay)
    modes = {"unmasked": unmasked, "masked": masked, "masked-cold": masked}
    runner.run(unmasked)  # warm-up (allocates the AdamW state)
    optimizer.param_groups[0]["lr"] = 0.0  # every mode and step sees the same weights
    times: dict[str, list[float]] = {m: [] for m in modes}
    for _ in range(args.steps):
        for mode, batch in modes.items():  # interleaved: a busy neighbour hits every mode
            if mode == "masked-cold":
                replay.clear()
            t0 = time.perf_counter()
            runner.run(batch)
            times[mode].append(time.perf_counter() - t0)
    step = {m: statistics.median(ts) for m, ts in times.items()}
    tokens = sum(e.num_tokens for e in unmasked)
    constrained = sum(e.num_generated for e in unmasked)
    trained = sum(e.num_generated for e in masked)
    print(f"{args.model}: {len(records)} episodes, {tokens} tokens, {constrained} of them "
          f"decoded under a grammar; masked trains the {trained} where it left a choice "
          f"({args.threads} thread(s), median of {args.steps} steps)")
    print(f"merge's grammar replay (controller, once per batch): {merge_replay_s:.2f} s")
    for mode, s in step.items():
        print(f"{mode:>12}: {s:6.2f} s/step  {s / step['unmasked']:.2f}x of unmasked")


if __name__ == "__main__":
    main()
