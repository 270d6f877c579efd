"""Token-exact capture through the shim: multi-turn chats merge into one timeline whose
ids are the engine's, byte for byte; an edited history is a recorded fork."""

from __future__ import annotations

import itertools
import json
from typing import Any

import openai

from swarmrl_server.timelines.merge import merge_calls
from tests.http_support import WEATHER_TOOL, Ep, start_episode, tool_call_text
from tests.store_support import stored_calls

QUESTIONS = ["Name a fruit.", "And a color?", "Which city?", "Pick a number.", "Thanks!"]


def aclient(ep: Ep) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.key, max_retries=0)


async def turn(client: openai.AsyncOpenAI, messages: list[Any], stream: bool,
               **kw: Any) -> tuple[dict[str, Any], list[int], list[int], dict[str, Any]]:
    """One call; returns (assistant message as sent back, prompt ids, completion ids, swarmrl)."""
    kw = {"model": "tiny", "messages": messages, "max_tokens": 10,
          "extra_body": {"return_token_ids": True}, **kw}
    if not stream:
        r = await client.chat.completions.create(**kw)
        msg = r.choices[0].message.model_dump(exclude_none=True)
        return msg, r.prompt_token_ids, r.choices[0].token_ids, r.swarmrl
    content, ids, prompt, info, calls = "", [], [], {}, []
    async for c in await client.chat.completions.create(**kw, stream=True):
        delta = c.choices[0].delta
        content += delta.content or ""
        calls += [{"id": t.id, "type": "function", "function": t.function.model_dump()}
                  for t in delta.tool_calls or []]
        ids += c.choices[0].model_extra.get("token_ids") or []
        prompt = c.model_extra.get("prompt_token_ids") or prompt
        info = c.model_extra.get("swarmrl") or info
    msg: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        msg["tool_calls"] = calls
    return msg, prompt, ids, info


async def test_five_turns_are_one_timeline_of_the_engines_exact_ids(http_server: Any) -> None:
    ep = await start_episode(http_server)
    client = aclient(ep)
    messages: list[Any] = [{"role": "system", "content": "You are terse."}]
    engine_ids: list[tuple[list[int], list[int]]] = []
    for i, question in enumerate(QUESTIONS):
        messages.append({"role": "user", "content": question})
        # Streamed and unary turns alternate: both must reassemble to the recorded reply.
        reply, prompt_ids, completion_ids, info = await turn(client, messages, stream=i % 2 == 1,
                                                             seed=i)
        assert info["fork_reason"] == ""
        engine_ids.append((prompt_ids, completion_ids))
        messages.append(reply)

    calls = await stored_calls(http_server, ep.episode_id)
    assert len(calls) == 5
    # The store holds exactly what the engine returned to the client.
    assert [(c.prompt_ids, c.completion_ids) for c in calls] == engine_ids
    for earlier, later in itertools.pairwise(calls):
        assert later.parent_call_id == earlier.call_id
    timelines, stats = merge_calls(calls)
    assert stats.timelines == 1 and stats.forks == 0
    (timeline,) = timelines
    last_prompt, last_completion = engine_ids[-1]
    assert timeline.token_ids == last_prompt + last_completion  # byte for byte
    generated = [t for t, m in zip(timeline.token_ids, timeline.loss_mask) if m]
    assert generated == [t for _, completion in engine_ids for t in completion]
    assert timeline.call_ids == [c.call_id for c in calls]


async def test_edited_history_is_a_recorded_fork(http_server: Any) -> None:
    ep = await start_episode(http_server)
    client = aclient(ep)
    messages: list[Any] = [{"role": "user", "content": QUESTIONS[0]}]
    reply, *_ = await turn(client, messages, stream=False)
    messages += [reply, {"role": "user", "content": QUESTIONS[1]}]
    *_, info = await turn(client, messages, stream=False)
    assert info["fork_reason"] == ""
    # The agent rewrites history (e.g. compaction): the shim cannot extend the old ids.
    edited = [{"role": "user", "content": "Name a vegetable."}, reply,
              {"role": "user", "content": QUESTIONS[1]}]
    *_, info = await turn(client, edited, stream=False)
    assert "message 0 differs" in info["fork_reason"]
    calls = await stored_calls(http_server, ep.episode_id)
    assert json.loads(calls[2].chat_json)["fork_reason"] == info["fork_reason"]
    assert calls[2].parent_call_id == ""
    _, stats = merge_calls(calls)
    assert stats.timelines == 2 and stats.forks == 1


async def test_tool_calling_turns_stay_on_one_timeline(scripted_server: Any) -> None:
    ep = await start_episode(scripted_server)
    client = aclient(ep)
    scripted_server.script.replies = [
        tool_call_text("get_weather", {"city": "Paris"}),
        tool_call_text("get_weather", {"city": "Oslo"}, before="And Oslo."),
        "Paris is warmer.",
        "You're welcome.",
        tool_call_text("get_weather", {"city": "Rome"}),
    ]
    messages: list[Any] = [{"role": "user", "content": "Compare Paris and Oslo."}]
    for i in range(5):
        # Streamed turns rebuild the message from the deltas, as a client does.
        reply, *_ = await turn(client, messages, stream=i in (1, 3), tools=[WEATHER_TOOL])
        messages.append(reply)
        for call in reply.get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "mild"})
        if not reply.get("tool_calls"):
            messages.append({"role": "user", "content": "Thanks."})
    calls = await stored_calls(scripted_server, ep.episode_id)
    _, stats = merge_calls(calls)
    assert len(calls) == 5 and stats.timelines == 1 and stats.forks == 0
