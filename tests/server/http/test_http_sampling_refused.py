"""Sampling settings are honoured exactly or refused by name, never silently dropped.

vLLM's request extras (guided_json, guided_regex, guided_choice, allowed_token_ids,
bad_words, ignore_eos and the others in `http.protocol.VLLM_EXTRAS_REFUSED`) too: each is
refused with a 400 naming it on every door, where it was once logged and dropped.

top_k, min_p, repetition_penalty and the other settings in
`http.protocol.REFUSED_UNLESS_NEUTRAL` would make the logprobs recorded at generation
differ from the trainer's recompute from the full softmax, so every door (chat
completions, completions, responses, messages) refuses a non-neutral value with a 400
naming the field, in its own API's error shape, and accepts the neutral ones. The refusal
happens while the body is parsed: on every engine (echo, hf, a real `vllm serve`) a
refused request leaves no recorded call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from swarmrl_server.http.protocol import REFUSED_UNLESS_NEUTRAL, VLLM_EXTRAS_REFUSED
from tests.engine_fixtures import make_engine
from tests.http_support import Ep, aclient, start_episode
from tests.server_fixtures import ServerFactory
from tests.store_support import stored_calls

USER = [{"role": "user", "content": "hi"}]
NOT_NEUTRAL: dict[str, object] = {
    "top_k": 40, "min_p": 0.05, "typical_p": 0.9, "top_a": 0.1, "repetition_penalty": 1.1,
    "presence_penalty": 0.5, "frequency_penalty": 0.5, "length_penalty": 0.8,
    "logit_bias": {"1": 5.0}, "min_tokens": 2,
}
NEUTRAL: list[dict[str, object]] = [
    {"top_k": -1, "min_p": 0, "typical_p": 1.0, "top_a": 0.0, "repetition_penalty": 1.0,
     "presence_penalty": 0.0, "frequency_penalty": 0, "length_penalty": 1, "logit_bias": {},
     "min_tokens": 0},
    {"top_k": 0, "min_p": None, "repetition_penalty": None},
]
DOORS = ("chat", "completions", "responses", "messages")
VLLM_EXTRAS: dict[str, object] = {
    "guided_json": {"type": "object"}, "guided_regex": "[a-z]+", "guided_choice": ["a", "b"],
    "guided_grammar": 'root ::= "a"', "structured_outputs": {"json": {"type": "object"}},
    "allowed_token_ids": [1, 2, 3], "bad_words": ["hi"], "ignore_eos": True,
    "use_beam_search": True, "truncate_prompt_tokens": 8,
}
"""A value of each of vLLM's extras that asks for something (`VLLM_EXTRAS_REFUSED`)."""
VLLM_NEUTRAL: dict[str, object] = {"bad_words": [], "ignore_eos": False, "use_beam_search": False,
                                   "guided_json": None, "allowed_token_ids": None}


def test_every_refused_field_is_tested() -> None:
    assert set(NOT_NEUTRAL) == set(REFUSED_UNLESS_NEUTRAL)
    assert {k for n in NEUTRAL for k in n} == set(REFUSED_UNLESS_NEUTRAL)


def test_every_vllm_extra_is_tested() -> None:
    assert set(VLLM_EXTRAS) == set(VLLM_EXTRAS_REFUSED)
    assert {"guided_json", "guided_regex", "guided_choice", "allowed_token_ids", "bad_words",
            "ignore_eos"} <= set(VLLM_EXTRAS_REFUSED)


async def call(door: str, ep: Ep, extra: dict[str, object]) -> Any:
    """One generating call of `door` with `extra` as top-level body fields."""
    if door == "messages":
        client = anthropic.AsyncAnthropic(base_url=ep.root_url, api_key=ep.key, max_retries=0)
        return await client.messages.create(model="tiny", max_tokens=2, messages=USER,  # type: ignore[arg-type]
                                            extra_body=extra)
    oai = aclient(ep)
    if door == "chat":
        return await oai.chat.completions.create(model="tiny", messages=USER, max_tokens=2,  # type: ignore[arg-type]
                                                 extra_body=extra)
    if door == "completions":
        return await oai.completions.create(model="tiny", prompt="hi", max_tokens=2,
                                            extra_body=extra)
    return await oai.responses.create(model="tiny", input="hi", max_output_tokens=16,
                                      extra_body=extra)


async def assert_refused(door: str, ep: Ep, name: str, value: object) -> None:
    """A 400 naming `name`: OpenAI's `param`, or the start of Anthropic's message."""
    error = anthropic.BadRequestError if door == "messages" else openai.BadRequestError
    with pytest.raises(error) as err:
        await call(door, ep, {name: value})
    body: Any = err.value.body
    if door == "messages":
        assert body["type"] == "error"  # the body, as the Anthropic client parsed it
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["message"].startswith(f"{name}: not supported")
    else:
        assert body["param"] == name and body["type"] == "invalid_request_error"
        assert body["message"].startswith(f"{name}: not supported")


@pytest.mark.parametrize("door", DOORS)
async def test_each_field_is_refused_by_name_on_each_door(http_server: Any, door: str) -> None:
    ep = await start_episode(http_server)
    for name, value in NOT_NEUTRAL.items():
        await assert_refused(door, ep, name, value)
    assert await stored_calls(http_server, ep.episode_id) == []
    for neutral in NEUTRAL:  # neutral values ask for nothing: served and recorded
        await call(door, ep, neutral)
    assert len(await stored_calls(http_server, ep.episode_id)) == len(NEUTRAL)


@pytest.mark.parametrize("name", sorted(VLLM_EXTRAS))
async def test_each_vllm_extra_is_refused_by_name_on_each_door(http_server: Any,
                                                             name: str) -> None:
    """Logged and dropped, a vLLM extra would serve something the client did not ask for
    (unconstrained text for a guided_json call, a turn ended at the end of text despite
    ignore_eos): each is a 400 naming it, on every door, and nothing is recorded."""
    ep = await start_episode(http_server)
    for door in DOORS:
        await assert_refused(door, ep, name, VLLM_EXTRAS[name])
    assert await stored_calls(http_server, ep.episode_id) == []
    if name in VLLM_NEUTRAL:  # a value that asks for nothing is served
        await call("chat", ep, {name: VLLM_NEUTRAL[name]})
        assert len(await stored_calls(http_server, ep.episode_id)) == 1


@pytest.fixture(params=["echo", "hf", pytest.param("vllm", marks=[pytest.mark.slow, pytest.mark.vllm])])
async def engine_server(request: pytest.FixtureRequest, make_server: ServerFactory,
                        tiny_model_dir: Path) -> Any:
    """A server whose model "tiny" runs on the engine named by the param (vLLM: the
    session's `vllm serve`)."""
    from swarmrl_server.hosting import ModelHost

    url = request.getfixturevalue("vllm_url") if request.param == "vllm" else ""
    engine = await make_engine(request.param, tiny_model_dir, url)
    hosts = {"tiny": ModelHost("tiny", engine, "tiny", tiny_model_dir)}
    return await make_server(http=True, hosts=hosts)


async def test_a_refused_request_never_reaches_the_engine(engine_server: Any) -> None:
    ep = await start_episode(engine_server)
    for door, (name, value) in zip(DOORS, [("top_k", 20), ("min_p", 0.1),
                                           ("repetition_penalty", 1.3), ("top_k", 5)]):
        await assert_refused(door, ep, name, value)
    assert await stored_calls(engine_server, ep.episode_id) == []
    await call("chat", ep, {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0})
    [recorded] = await stored_calls(engine_server, ep.episode_id)
    assert recorded.completion_ids  # the engine served the neutral request
