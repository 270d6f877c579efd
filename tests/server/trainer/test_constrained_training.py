"""How constrained tokens are recorded and trained (engine.grammar, timelines.grammar).

Under a grammar the engine samples from, and reports logprobs of, the masked and
renormalised distribution: a token the grammar forces has logprob 0 exactly. The call
records its grammar; the trainer replays it along the recorded ids and masks its own
logits the same way, so its recompute equals the recorded logprobs (hf and vLLM, merged
and tree-packed), forced tokens leave the loss, and the choices the grammar left (a
tool's arguments) carry the gradient. `constrained_calls=unmasked` trains the same
choices with logprobs recomputed over the full softmax; `constrained_calls=context` trains
such calls as context, as before grammars were recorded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import openai
import pytest
import torch

from swarmrl_server.engine.base import Engine, GenerationOutput, SamplingParams
from swarmrl_server.engine.grammar import GrammarSpec, json_schema_tag, tool_call_tag
from swarmrl_server.episodes.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from swarmrl_server.models import load_model
from swarmrl_server.security import IN_PROCESS
from swarmrl_server.store.records import CallRecord
from swarmrl_server.store.sqlite import SqliteStore
from swarmrl_server.timelines.flops import ModelShape
from swarmrl_server.timelines.grammar import GrammarReplay, allowed_M_V
from swarmrl_server.timelines.logprobs import forward_packed, forward_timelines
from swarmrl_server.timelines.merge import Timeline, merge_calls
from swarmrl_server.timelines.pack import plan_packing
from swarmrl_server.trainer.config import TrainerConfig, TrainerConfigError, describe_options
from swarmrl_server.trainer.setup import grammar_for
from swarmrl_server.trainer.step import StepRunner, batch_advantages, episode_rows, generated_mask
from tests.engine_fixtures import make_engine
from tests.http_support import start_episode
from tests.store_support import stored_calls, stored_episode

CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Seoul", "Lima"]}},
        "required": ["city"]}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}
ANSWER = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
TOL = 1e-4
ERRORS: dict[str, float] = {}
"""Largest |recorded - recomputed| per engine and forward (printed for the record)."""


async def test_logprobs_are_those_of_the_masked_distribution(http_server: Any) -> None:
    engine = http_server.swarm.models["tiny"].engine
    prompt = engine.tokenizer("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                              add_special_tokens=False)["input_ids"]
    tag = tool_call_tag([("get_weather", CITY)], TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
    outputs = {}
    for constrained in (False, True):
        params = SamplingParams(max_tokens=40, seed=1, top_logprobs=3,
                                structural_tag=tag if constrained else None)
        outputs[constrained] = await _generate(engine, prompt, params)
    free, forced = outputs[False], outputs[True]
    assert forced.text.startswith('<tool_call>\n{"name": "get_weather", "arguments": ')
    assert forced.completion_ids[-1] in engine.eos_token_ids
    # What the call records of its grammar: the tag as given, the engine's stop tokens.
    assert free.grammar == ""
    assert GrammarSpec.from_json(forced.grammar) == GrammarSpec(
        tag, tuple(engine.eos_token_ids), engine.vocab_size)
    recorded_N = torch.tensor(forced.logprobs)
    # Where the grammar allowed one token only, that token had probability 1.
    assert (recorded_N == 0.0).sum() >= 3
    for lp, tops in zip(forced.logprobs, forced.top_logprobs):
        if lp == 0.0:
            assert all(alt == float("-inf") for _, alt in tops[1:])
    assert max(free.logprobs) < -1.0  # the unmasked model spreads its mass widely


# -- the trainer's masked recompute equals the recorded logprobs ----------------------


async def _generate(engine: Engine, prompt: list[int], params: SamplingParams
                    ) -> GenerationOutput:
    async for item in engine.generate(prompt, params):
        if isinstance(item, GenerationOutput):
            return item
    raise AssertionError("no output")


def _record(i: int, out: GenerationOutput, temperature: float) -> CallRecord:
    return CallRecord(
        call_id=f"c{i}", episode_id="e", seq=i, model="tiny", prompt_ids=list(out.prompt_ids),
        completion_ids=list(out.completion_ids), logprobs=list(out.logprobs),
        policy_version=0, finish_reason=out.finish_reason, temperature=temperature,
        text=out.text, constrained=bool(out.grammar), grammar=out.grammar)


async def _agent_calls(engine: Engine) -> list[CallRecord]:
    """A forced tool call; after its result, a JSON answer and a sibling of it (a fork from
    the same prompt, which packing shares); then a free turn after the answer."""
    tok: Any = engine.tokenizer  # type: ignore[attr-defined]

    def ids(text: str) -> list[int]:
        return list(tok(text, add_special_tokens=False)["input_ids"])

    tool_tag = tool_call_tag([("get_weather", CITY)], TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
    p1 = ids("<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n")
    c1 = await _generate(engine, p1, SamplingParams(
        temperature=1.0, max_tokens=40, seed=1, structural_tag=tool_tag))
    p2 = p1 + c1.completion_ids + ids("\n<|im_start|>tool\nsunny<|im_end|>\n<|im_start|>assistant\n")
    calls = [_record(0, c1, 1.0)]
    for i, (temp, seed) in enumerate([(0.7, 2), (1.3, 3)], 1):
        out = await _generate(engine, p2, SamplingParams(
            temperature=temp, max_tokens=20, seed=seed, structural_tag=json_schema_tag(ANSWER)))
        calls.append(_record(i, out, temp))
    p4 = p2 + calls[1].completion_ids + ids("\n<|im_start|>user\nok<|im_end|>\n")
    c4 = await _generate(engine, p4, SamplingParams(temperature=1.0, max_tokens=4, seed=4))
    calls.append(_record(3, c4, 1.0))
    assert [c.constrained for c in calls] == [True, True, True, False]
    return calls


def _errors(rows: list[Timeline], logprobs: list[torch.Tensor]) -> list[float]:
    """|recorded - recomputed| at every trained token."""
    return [abs(float(lp[p - 1]) - r.old_logprobs[p])
            for r, lp in zip(rows, logprobs) for p, m in enumerate(r.loss_mask) if m]


def _check_recompute(engine_kind: str, model: torch.nn.Module, tokenizer: Any,
                     calls: list[CallRecord]) -> None:
    replay = GrammarReplay(tokenizer)
    rows, _ = merge_calls(calls, replay.choices)
    assert len(rows) == 2  # the sibling forked
    masks = replay.row_masks(rows)
    trained = sum(r.num_generated for r in rows)
    constrained = sum(e - s for r in rows for s, e, _ in r.grammars)
    forced = [(r, p) for r in rows for s, e, _ in r.grammars for p in range(s, e)
              if not r.loss_mask[p]]
    assert forced and trained > len(calls[-1].completion_ids)  # choices and forced tokens
    assert constrained == sum(len(c.completion_ids) for c in calls[:3])
    shape = ModelShape.from_model(model)
    with torch.no_grad():
        full, _ = forward_timelines(model, rows, masks=masks)
        runs = {"merged": full,
                "merged, trained only": forward_timelines(model, rows, trained_only=True,
                                                          masks=masks)[0]}
        for kind in ("tree", "dense"):
            plan = plan_packing(rows, shape, kinds=("rows", kind), segment_overhead_tokens=0)
            assert {u.kind for u in plan.units} == {kind}
            runs[kind] = forward_packed(model, plan, trained_only=True, masks=masks)[0]
        unmasked = forward_timelines(model, rows)[0]
    for name, logprobs in runs.items():
        errors = _errors(rows, logprobs)
        assert len(errors) == trained
        ERRORS[f"{engine_kind}, {name}"] = max(errors)
        assert max(errors) <= TOL, (name, max(errors))
    # A forced token's recomputed logprob is 0: the mask left it alone.
    index = {id(r): i for i, r in enumerate(rows)}
    assert all(abs(float(full[index[id(r)]][p - 1])) <= TOL for r, p in forced)
    # Without the mask the trainer would see another distribution altogether.
    assert max(_errors(rows, unmasked)) > 0.5
    print(f"\nmax |recorded - recomputed| ({trained} trained tokens): {ERRORS}")


async def test_hf_recorded_logprobs_equal_the_masked_recompute(tiny_model_dir: Path) -> None:
    engine = await make_engine("hf", tiny_model_dir)
    try:
        calls = await _agent_calls(engine)
    finally:
        await engine.stop()
    model, tokenizer = load_model(tiny_model_dir)
    _check_recompute("hf", model, tokenizer, calls)


@pytest.mark.slow
async def test_vllm_recorded_logprobs_equal_the_masked_recompute(
    vllm_url: str, tiny_model_dir: Path
) -> None:
    engine = await make_engine("vllm", tiny_model_dir, vllm_url)
    try:
        calls = await _agent_calls(engine)
    finally:
        await engine.stop()
    spec = GrammarSpec.from_json(calls[0].grammar)
    assert set(spec.stop_token_ids) == set(engine.eos_token_ids)
    model, tokenizer = load_model(tiny_model_dir)
    _check_recompute("vllm", model, tokenizer, calls)


# -- what trains: the arguments, not what the grammar forced ---------------------------


async def _forced_tool_episodes(running: Any, n: int) -> list[Any]:
    """`n` episodes of an agent whose every call is a forced tool call; the reward depends
    on the tool's arguments only (1 for Paris)."""
    records = []
    for seed in range(n):
        ep = await start_episode(running)
        client = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.key, max_retries=0)
        reply = await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Weather?"}], tools=[TOOL],
            tool_choice="required", max_tokens=60, seed=seed, temperature=1.0)
        (tc,) = reply.choices[0].message.tool_calls or []
        reward = float(json.loads(tc.function.arguments)["city"] == "Paris")
        await running.swarm.episodes.end(ep.episode_id, reward, "", caller=IN_PROCESS)
        records.append(await stored_episode(running, ep.episode_id))
    return records


async def test_forced_tool_calls_train_their_arguments_only(
    http_server: Any, tiny_model_dir: Path
) -> None:
    records = await _forced_tool_episodes(http_server, 8)
    rewards = {r.reward for r in records}
    assert rewards == {0.0, 1.0}, rewards  # the group has something to compare
    model, tokenizer = load_model(tiny_model_dir)
    replay = GrammarReplay(tokenizer)
    episodes = [episode_rows(r, "tiny", "g", replay.choices)[0] for r in records]
    city_tokens = 0
    for e, record in zip(episodes, records):
        (call,) = record.calls
        (row,) = e.rows
        start = len(call.prompt_ids)
        replayed = replay.replay(call.grammar, call.completion_ids)
        allowed_N = allowed_M_V(replayed.bitmask_N_W, len(tokenizer)).sum(1).tolist()
        for i in range(len(call.completion_ids)):
            # Trained exactly where the grammar left a choice: the arguments' values and
            # whitespace, and how the fixed text is split into tokens, never a forced token.
            assert row.loss_mask[start + i] == int(allowed_N[i] > 1)
            if allowed_N[i] == 1:
                assert call.logprobs[i] == 0.0
            if re.search(r'"city"\s*:\s*"$', tokenizer.decode(call.completion_ids[:i])):
                assert row.loss_mask[start + i] == 1  # the choice the reward is about
                city_tokens += 1
        assert 0 < e.num_generated < len(call.completion_ids)
    assert city_tokens == len(records)

    # The loss's gradient: at every argument choice of an episode with an advantage, none
    # at a forced token (loss mask 0, and its masked logprob is 0 whatever the weights).
    captured: list[torch.Tensor] = []

    def forward(*args: Any, **kwargs: Any) -> Any:
        logprobs, entropy = forward_timelines(*args, **kwargs)
        for lp in logprobs:
            lp.retain_grad()
        captured.extend(logprobs)
        return logprobs, entropy

    config = TrainerConfig(progress=False)
    runner = StepRunner(model, torch.optim.SGD(model.parameters(), lr=0.0), config,
                        pad_id=0, forward=forward, grammar=replay)
    advantages_E_L = batch_advantages(episodes, config)
    mask_E_L = generated_mask(episodes)
    loss, _, _ = runner._micro_batch_loss(episodes, advantages_E_L, mask_E_L, mask_E_L.shape[1])
    loss.backward()
    for e, lp, adv_L in zip(episodes, captured, advantages_E_L):
        (row,) = e.rows
        grad = lp.grad
        assert grad is not None
        for p, m in enumerate(row.loss_mask[1:]):
            if not m:
                assert grad[p] == 0
        if float(adv_L[0]) != 0:
            trained = [p for p, m in enumerate(row.loss_mask[1:]) if m]
            assert all(grad[p] != 0 for p in trained)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())

    # A forced token's masked logprob has no gradient at all, even when computed.
    model.zero_grad()
    rows = [e.rows[0] for e in episodes]
    full, _ = forward_timelines(model, rows, masks=replay.row_masks(rows))
    forced_sum = sum(lp[p - 1] for r, lp in zip(rows, full) for s, e_, _ in r.grammars
                     for p in range(s, e_) if not r.loss_mask[p])
    assert isinstance(forced_sum, torch.Tensor) and float(forced_sum.detach()) == 0.0
    forced_sum.backward()
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())

    # As context (`constrained_calls=context`): nothing of these episodes trains.
    for record in records:
        rows_ctx, _ = episode_rows(record, "tiny", "g", None)
        assert rows_ctx.num_generated == 0 and not rows_ctx.rows[0].grammars


async def test_unmasked_trains_the_same_tokens_over_the_full_softmax(
    http_server: Any, tiny_model_dir: Path
) -> None:
    """`constrained_calls=unmasked`, the mask's comparison arm: the choices the mask arm
    trains, with logprobs recomputed over the whole vocabulary, so a choice's importance
    ratio starts below 1 by exactly the mass the grammar removed."""
    records = await _forced_tool_episodes(http_server, 4)
    model, tokenizer = load_model(tiny_model_dir)
    model.eval()
    replay = GrammarReplay(tokenizer)
    episodes = [episode_rows(r, "tiny", "g", replay.choices)[0] for r in records]
    rows = [e.rows[0] for e in episodes]
    recomputed: dict[str, list[torch.Tensor]] = {}
    for arm in ("mask", "unmasked"):
        config = TrainerConfig.from_options({"constrained_calls": arm, "progress": "false"})
        assert config.trains_constrained
        captured = recomputed[arm] = []

        def forward(*args: Any, into: list[torch.Tensor] = captured, **kwargs: Any) -> Any:
            logprobs, entropy = forward_timelines(*args, **kwargs)
            into.extend(lp.detach() for lp in logprobs)
            return logprobs, entropy

        # The workers' wiring: the replay a runner gets for this option.
        runner = StepRunner(model, torch.optim.SGD(model.parameters(), lr=0.0), config,
                            pad_id=0, forward=forward, **grammar_for(tiny_model_dir, config))
        mask_E_L = generated_mask(episodes)
        with torch.no_grad():
            runner._micro_batch_loss(episodes, batch_advantages(episodes, config), mask_E_L,
                                     mask_E_L.shape[1])
    removed = 0
    for r, masked, unmasked in zip(rows, recomputed["mask"], recomputed["unmasked"]):
        (start, end, grammar), = r.grammars
        with torch.no_grad():
            logits_T_V = model(torch.tensor([r.token_ids])).logits[0].float()
        temps_T = torch.tensor(r.temperatures[1:])
        full_T_V = torch.log_softmax(logits_T_V[:-1] / temps_T[:, None], dim=-1)
        allowed_N_V = allowed_M_V(replay.replay(grammar, r.token_ids[start:end]).bitmask_N_W,
                                  full_T_V.shape[-1])
        trained = [p for p in range(start, end) if r.loss_mask[p]]
        assert trained  # the arguments: the choices the mask arm trains too
        for p in trained:
            full = float(full_T_V[p - 1, r.token_ids[p]])
            assert float(unmasked[p - 1]) == pytest.approx(full, abs=TOL)
            assert float(masked[p - 1]) == pytest.approx(r.old_logprobs[p], abs=TOL)
            # Masked minus unmasked: minus the log of the mass the grammar left.
            kept = float(torch.logsumexp(full_T_V[p - 1][allowed_N_V[p - start]], 0))
            assert float(masked[p - 1] - unmasked[p - 1]) == pytest.approx(-kept, abs=TOL)
            removed += kept < -1e-3
    assert removed > 0  # the arms differ where the mask removed mass


def test_constrained_calls_option() -> None:
    assert TrainerConfig().constrained_calls == "mask"
    config = TrainerConfig.from_options({"constrained_calls": "context"})
    assert config.constrained_calls == "context"
    assert not config.trains_constrained and not config.masks_constrained
    unmasked = TrainerConfig.from_options({"constrained_calls": "unmasked"})
    assert unmasked.trains_constrained and not unmasked.masks_constrained
    assert TrainerConfig().masks_constrained
    assert "unmasked (the same tokens trained" in describe_options()
    with pytest.raises(TrainerConfigError, match="constrained_calls"):
        TrainerConfig.from_options({"constrained_calls": "sometimes"})


async def test_grammar_is_stored_and_calls_without_it_train_as_context(http_server: Any) -> None:
    ep = await start_episode(http_server)
    client = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.key, max_retries=0)
    first = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Weather?"}], tools=[TOOL],
        tool_choice="required", max_tokens=60, seed=2)
    reply = first.choices[0].message
    (tc,) = reply.tool_calls or []
    history = [{"role": "user", "content": "Weather?"}, reply.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": tc.id, "content": "sunny"}]
    await client.chat.completions.create(model="tiny", messages=history, tools=[TOOL],
                                         max_tokens=8, seed=3)
    forced, free = await stored_calls(http_server, ep.episode_id)
    assert forced.constrained and not free.constrained
    assert forced.grammar and not free.grammar
    assert free.parent_call_id == forced.call_id  # one token timeline
    await http_server.swarm.episodes.end(ep.episode_id, 1.0, "", caller=IN_PROCESS)

    # What the trainer reads: the store, from disk, through a second connection.
    store = SqliteStore(http_server.config.data_dir / "swarm.sqlite3")
    await store.open()
    try:
        episode = await store.get_episode(ep.episode_id, with_calls=True)
    finally:
        await store.close()
    calls = sorted(episode.calls, key=lambda c: c.seq)
    assert [c.grammar for c in calls] == [forced.grammar, ""]
    engine = http_server.swarm.models["tiny"].engine
    replay = GrammarReplay(engine.tokenizer)
    start = len(forced.prompt_ids)
    forced_span = slice(start, start + len(forced.completion_ids))
    # Under its grammar: the choices train, with the recorded logprobs.
    (row,), _ = merge_calls(calls, replay.choices)
    assert row.grammars == [(start, start + len(forced.completion_ids), forced.grammar)]
    assert 0 < sum(row.loss_mask[forced_span]) < len(forced.completion_ids)
    # A call recorded before grammars were kept (or the option `context`) is context only.
    for grammar, choices in (("", replay.choices), (forced.grammar, None)):
        calls[0].grammar = grammar
        rows, _ = episode_rows(episode, "tiny", "g", choices)
        (row,) = rows.rows
        free_span = slice(len(free.prompt_ids), len(row))
        assert row.token_ids[forced_span] == forced.completion_ids
        assert set(row.loss_mask[forced_span]) == {0} and not row.grammars
        assert row.loss_mask[free_span] == [1] * len(free.completion_ids)
        assert rows.num_generated == len(free.completion_ids)
        assert rows.old_logprobs_L().tolist() == pytest.approx(free.logprobs)
