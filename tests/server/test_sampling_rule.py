"""One sampling rule for every engine and door: a trainable model refuses top_p < 1.

The trainer's importance ratio compares each recorded logprob with its recompute from the
full distribution; a nucleus's tokens are drawn from a truncated one that neither side
represents (`episodes.resolve.check_trained_sampling`). So on a trainable model a
top_p < 1 at temperature > 0 is refused before any work, naming the field: HTTP 400
`param: top_p` (official `openai` and `anthropic` clients as the oracle), gRPC
INVALID_ARGUMENT naming `sampling.top_p`; the same request is served on a model that is
not trained, and greedy calls (where top_p changes nothing) are served on both. Every
engine gets the rule from its host, not from itself: the hf model of a real training
server, and the echo and vLLM engines hosted as trainable.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anthropic
import grpc
import openai
import pytest
from google.protobuf import duration_pb2

from swarmrl_proto.v1 import episode_service_pb2 as ep_pb
from swarmrl_proto.v1 import episode_service_pb2_grpc as ep_grpc
from swarmrl_proto.v1 import session_service_pb2 as s_pb
from swarmrl_proto.v1 import session_service_pb2_grpc as s_grpc
from swarmrl_proto.v1 import types_pb2 as t_pb
from tests.engine_fixtures import make_engine
from tests.grpc_support import details
from tests.http_support import Ep, aclient, start_episode
from tests.observe_support import TRAIN_OPTIONS
from tests.server_fixtures import ServerFactory
from tests.store_support import stored_calls

USER = [{"role": "user", "content": "hi"}]
DOORS = ("chat", "completions", "responses", "messages")


async def http_call(door: str, ep: Ep, top_p: float, temperature: float = 1.0) -> None:
    """One call of `door` in episode `ep` with `top_p`."""
    if door == "messages":
        client = anthropic.AsyncAnthropic(base_url=ep.root_url, api_key=ep.key, max_retries=0)
        await client.messages.create(model="tiny", max_tokens=2, messages=USER,  # type: ignore[arg-type]
                                     extra_body={"top_p": top_p, "temperature": temperature})
    elif door == "chat":
        await aclient(ep).chat.completions.create(
            model="tiny", messages=USER, max_tokens=2, top_p=top_p,  # type: ignore[arg-type]
            temperature=temperature)
    elif door == "responses":
        await aclient(ep).responses.create(model="tiny", input="hi", max_output_tokens=16,
                                           top_p=top_p, temperature=temperature)
    else:
        await aclient(ep).completions.create(model="tiny", prompt="hi", max_tokens=2,
                                             top_p=top_p, temperature=temperature)


async def grpc_generate(running: Any, top_p: float, temperature: float = 1.0) -> None:
    """One gRPC Generate with `top_p` in a fresh session and episode."""
    async with grpc.aio.insecure_channel(running.grpc_target) as channel:
        sessions = s_grpc.SessionServiceStub(channel)
        episodes = ep_grpc.EpisodeServiceStub(channel)
        session_id = uuid.uuid4().hex
        lease = duration_pb2.Duration()
        lease.FromSeconds(30)
        await sessions.OpenSession(s_pb.OpenSessionRequest(session_id=session_id,
                                                           client_name="test", lease=lease))
        started = await episodes.StartEpisode(ep_pb.StartEpisodeRequest(
            session_id=session_id, task_id="t"))
        async for _ in episodes.Generate(ep_pb.GenerateRequest(
                episode_id=started.episode_id, tokens=ep_pb.TokenInput(token_ids=[1, 2]),
                sampling=t_pb.SamplingParams(max_tokens=2, top_p=top_p,
                                             temperature=temperature))):
            pass


async def assert_top_p_refused(running: Any) -> None:
    """Every door refuses top_p=0.9 naming it, and nothing is recorded; greedy is served."""
    ep = await start_episode(running)
    for door in DOORS:
        error = anthropic.BadRequestError if door == "messages" else openai.BadRequestError
        with pytest.raises(error) as err:
            await http_call(door, ep, top_p=0.9)
        body: Any = err.value.body
        if door == "messages":
            assert body["error"]["type"] == "invalid_request_error"
            message = body["error"]["message"]
        else:
            assert body["param"] == "top_p" and body["type"] == "invalid_request_error"
            message = body["message"]
        assert message.startswith("top_p: must be 1 for a trainable model; got 0.9")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await grpc_generate(running, top_p=0.9)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert details(info.value) == ("INVALID_FIELD", "sampling.top_p")
    assert await stored_calls(running, ep.episode_id) == []
    # Greedy decoding takes the top token whatever top_p is: served on a trainable model.
    await http_call("chat", ep, top_p=0.9, temperature=0.0)
    assert len(await stored_calls(running, ep.episode_id)) == 1
    await grpc_generate(running, top_p=0.9, temperature=0.0)


async def test_a_trainable_hf_model_refuses_top_p_on_every_door(
        make_server: ServerFactory) -> None:
    running = await make_server(http=True, train=TRAIN_OPTIONS)
    assert running.swarm.models["tiny"].trainable
    await assert_top_p_refused(running)
    ep = await start_episode(running)
    await http_call("chat", ep, top_p=1.0)  # the full distribution: served
    assert len(await stored_calls(running, ep.episode_id)) == 1


async def test_a_model_not_trained_samples_a_nucleus(make_server: ServerFactory) -> None:
    running = await make_server(http=True)
    assert not running.swarm.models["tiny"].trainable
    ep = await start_episode(running)
    for door in DOORS:
        await http_call(door, ep, top_p=0.9)
    assert len(await stored_calls(running, ep.episode_id)) == len(DOORS)
    await grpc_generate(running, top_p=0.9)


@pytest.fixture(params=["echo", pytest.param("vllm", marks=[pytest.mark.slow, pytest.mark.vllm])])
async def trainable_engine_server(request: pytest.FixtureRequest, make_server: ServerFactory,
                                  tiny_model_dir: Path) -> Any:
    """A server whose model "tiny" runs on the engine named by the param, hosted as
    trainable (vLLM: the session's `vllm serve`)."""
    from swarmrl_server.hosting import ModelHost

    url = request.getfixturevalue("vllm_url") if request.param == "vllm" else ""
    engine = await make_engine(request.param, tiny_model_dir, url)
    hosts = {"tiny": ModelHost("tiny", engine, "tiny", tiny_model_dir, trainable=True)}
    return await make_server(http=True, hosts=hosts)


async def test_every_engine_of_a_trainable_model_refuses_top_p(
        trainable_engine_server: Any) -> None:
    await assert_top_p_refused(trainable_engine_server)
