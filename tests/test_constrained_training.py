"""How constrained tokens are recorded and trained (engine.grammar's documented rule).

Under a grammar the engine samples from, and reports logprobs of, the masked and
renormalised distribution: a token the grammar forces has logprob 0 exactly. The
trainer's forward pass cannot recompute that distribution, so a constrained call is
stored as such and its completion is trained as context, outside the loss.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from swarmrl_server.engine.base import GenerationOutput, SamplingParams
from swarmrl_server.engine.grammar import tool_call_tag
from swarmrl_server.episodes.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from swarmrl_server.security import IN_PROCESS
from swarmrl_server.store.sqlite import SqliteStore
from swarmrl_server.trainer.step import episode_rows
from tests.http_support import start_episode, stored_calls

CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Seoul"]}},
        "required": ["city"]}
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": CITY}}


async def test_logprobs_are_those_of_the_masked_distribution(http_server: Any) -> None:
    engine = http_server.swarm.models["tiny"].engine
    prompt = engine.tokenizer("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                              add_special_tokens=False)["input_ids"]
    tag = tool_call_tag([("get_weather", CITY)], TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
    outputs = {}
    for constrained in (False, True):
        params = SamplingParams(max_tokens=40, seed=1, top_logprobs=3,
                                structural_tag=tag if constrained else None)
        async for item in engine.generate(prompt, params):
            if isinstance(item, GenerationOutput):
                outputs[constrained] = item
    free, forced = outputs[False], outputs[True]
    assert forced.text.startswith('<tool_call>\n{"name": "get_weather", "arguments": ')
    assert forced.completion_ids[-1] in engine.eos_token_ids

    # Recompute both distributions from one plain forward pass over prompt + completion.
    import torch
    import xgrammar as xgr

    ids = prompt + forced.completion_ids
    with torch.no_grad():
        logits_T_V = engine.model(input_ids=torch.tensor([ids])).logits[0].float()
    logits_N_V = logits_T_V[len(prompt) - 1 : len(ids) - 1].clone()
    plain_N = torch.log_softmax(logits_N_V, -1).gather(
        1, torch.tensor(forced.completion_ids)[:, None])[:, 0]
    matcher = engine._grammar.matcher(tag)
    bitmask = xgr.allocate_token_bitmask(1, engine.vocab_size)
    for i, token in enumerate(forced.completion_ids):
        matcher.fill_next_token_bitmask(bitmask)
        xgr.apply_token_bitmask_inplace(logits_N_V[i : i + 1], bitmask)
        assert matcher.accept_token(token)
    masked_N = torch.log_softmax(logits_N_V, -1).gather(
        1, torch.tensor(forced.completion_ids)[:, None])[:, 0]
    recorded_N = torch.tensor(forced.logprobs)
    # The recorded logprob is the masked distribution's, never the plain model's ...
    torch.testing.assert_close(recorded_N, masked_N, atol=1e-4, rtol=1e-4)
    assert (recorded_N > plain_N + 0.5).all()
    # ... and where the grammar allowed one token only, that token had probability 1.
    assert (recorded_N == 0.0).sum() >= 3
    for lp, tops in zip(forced.logprobs, forced.top_logprobs):
        if lp == 0.0:
            assert all(alt == float("-inf") for _, alt in tops[1:])
    assert max(free.logprobs) < -1.0  # the unmasked model spreads its mass widely


async def test_constrained_calls_are_context_in_training(http_server: Any) -> None:
    ep = await start_episode(http_server)
    client = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.key, max_retries=0)
    first = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Weather?"}], tools=[TOOL],
        tool_choice="required", max_tokens=60, seed=2)
    reply = first.choices[0].message
    (tc,) = reply.tool_calls
    history = [{"role": "user", "content": "Weather?"}, reply.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": tc.id, "content": "sunny"}]
    await client.chat.completions.create(model="tiny", messages=history, tools=[TOOL],
                                         max_tokens=8, seed=3)
    forced, free = await stored_calls(http_server, ep.episode_id)
    assert forced.constrained and not free.constrained
    assert free.parent_call_id == forced.call_id  # one token timeline
    await http_server.swarm.episodes.end(ep.episode_id, 1.0, "", caller=IN_PROCESS)

    # What the trainer reads: the store, from disk, through a second connection.
    store = SqliteStore(http_server.config.data_dir / "swarm.sqlite3")
    await store.open()
    try:
        episode = await store.get_episode(ep.episode_id, with_calls=True)
    finally:
        await store.close()
    assert [c.constrained for c in sorted(episode.calls, key=lambda c: c.seq)] == [True, False]
    rows, _ = episode_rows(episode, "tiny", "g")
    (row,) = rows.rows
    start = len(forced.prompt_ids)
    forced_span = slice(start, start + len(forced.completion_ids))
    free_span = slice(len(free.prompt_ids), len(row))
    assert row.token_ids[forced_span] == forced.completion_ids
    assert set(row.loss_mask[forced_span]) == {0}
    assert row.loss_mask[free_span] == [1] * len(free.completion_ids)
    assert rows.num_generated == len(free.completion_ids)
    assert rows.old_logprobs_L().tolist() == pytest.approx(free.logprobs)
