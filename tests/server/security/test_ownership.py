"""Ownership: a session belongs to the principal that opened it, an episode to its
session's owner; nobody else may read, generate in, reward, end or abort it, or act
on the session, and request_id replays stay within their owner.

One real server with API keys: alice (two keys bound to one principal), bob (a bare
key, his own principal) and an admin. Over gRPC every refusal is NOT_FOUND, exactly
what an unknown id gets; over HTTP only the per-episode key reaches its episode.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import openai
import pytest

from swarmrl_proto.v1 import episode_service_pb2 as ep_pb
from swarmrl_proto.v1 import episode_service_pb2_grpc as ep_grpc
from swarmrl_proto.v1 import session_service_pb2 as s_pb
from swarmrl_proto.v1 import session_service_pb2_grpc as s_grpc
from swarmrl_proto.v1 import types_pb2 as t_pb
from tests.server_fixtures import ServerFactory

ALICE_1, ALICE_2, BOB, ADMIN = "alice-key-1", "alice-key-2", "bob-key", "admin-key"


class Client:
    """Raw gRPC stubs that send one API key on every call."""

    def __init__(self, channel: grpc.aio.Channel, key: str) -> None:
        self.md = (("authorization", f"Bearer {key}"),)
        self.sessions = s_grpc.SessionServiceStub(channel)
        self.episodes = ep_grpc.EpisodeServiceStub(channel)

    async def open_session(self, session_id: str | None = None) -> str:
        session_id = session_id or uuid.uuid4().hex
        await self.sessions.OpenSession(
            s_pb.OpenSessionRequest(session_id=session_id, client_name="t"), metadata=self.md)
        return session_id

    async def start(self, session_id: str, request_id: str = "") -> ep_pb.StartEpisodeResponse:
        return await self.episodes.StartEpisode(ep_pb.StartEpisodeRequest(
            session_id=session_id, task_id="t", request_id=request_id), metadata=self.md)

    async def generate(self, episode_id: str, request_id: str = "") -> ep_pb.GenerateResult:
        result = None
        async for r in self.episodes.Generate(ep_pb.GenerateRequest(
                episode_id=episode_id, request_id=request_id,
                tokens=ep_pb.TokenInput(token_ids=[5, 6, 7]),
                sampling=t_pb.SamplingParams(max_tokens=2)), metadata=self.md):
            if r.HasField("result"):
                result = r.result
        assert result is not None
        return result

    async def get(self, episode_id: str) -> ep_pb.Episode:
        r = await self.episodes.GetEpisode(
            ep_pb.GetEpisodeRequest(episode_id=episode_id, include_calls=True), metadata=self.md)
        return r.episode


@pytest.fixture
async def keyed(make_server: ServerFactory) -> AsyncIterator[Any]:
    running = await make_server(http=True, admin_keys=(ADMIN,),
                                client_keys=(f"alice={ALICE_1}", f"alice={ALICE_2}", BOB))
    async with grpc.aio.insecure_channel(running.grpc_target) as channel:
        running.clients = {k: Client(channel, k) for k in (ALICE_1, ALICE_2, BOB, ADMIN)}
        try:
            yield running
        finally:
            await make_server.stop(running)


async def _not_found(coro: Any) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await coro
    assert err.value.code() == grpc.StatusCode.NOT_FOUND, err.value.details()


async def test_other_principals_cannot_touch_an_episode_over_grpc(keyed: Any) -> None:
    alice, bob = keyed.clients[ALICE_1], keyed.clients[BOB]
    session = await alice.open_session()
    ep = await alice.start(session)
    first = await alice.generate(ep.episode_id, request_id="g1")
    eid = ep.episode_id

    # Bob's every action answers like an unknown id, and changes nothing.
    await _not_found(bob.get(eid))
    await _not_found(bob.generate(eid))
    await _not_found(bob.generate(eid, request_id="g1"))  # no replay of Alice's call either
    await _not_found(bob.episodes.SubmitReward(
        ep_pb.SubmitRewardRequest(episode_id=eid, value=999.0), metadata=bob.md))
    await _not_found(bob.episodes.SubmitReward(
        ep_pb.SubmitRewardRequest(episode_id=eid, value=999.0, call_id=first.call_id),
        metadata=bob.md))
    await _not_found(bob.episodes.EndEpisode(
        ep_pb.EndEpisodeRequest(episode_id=eid, reward=999.0), metadata=bob.md))
    await _not_found(bob.episodes.AbortEpisode(
        ep_pb.AbortEpisodeRequest(episode_id=eid, reason="mine now"), metadata=bob.md))
    unknown = f"ep-{uuid.uuid4().hex}"
    await _not_found(bob.get(unknown))

    record = await alice.get(eid)
    assert record.state == t_pb.EPISODE_STATE_OPEN
    assert not record.HasField("reward")
    assert [c.call_id for c in record.calls] == [first.call_id]
    assert not any(c.HasField("reward") for c in record.calls)

    # Alice's second key is the same principal; she ends it, and Bob cannot replay
    # her EndEpisode request id to read the stored answer.
    alice2 = keyed.clients[ALICE_2]
    assert (await alice2.generate(eid, request_id="g1")).call_id == first.call_id
    await alice2.episodes.EndEpisode(
        ep_pb.EndEpisodeRequest(episode_id=eid, reward=1.0, request_id="end-1"), metadata=alice2.md)
    await _not_found(bob.episodes.EndEpisode(
        ep_pb.EndEpisodeRequest(episode_id=eid, reward=1.0, request_id="end-1"), metadata=bob.md))
    await _not_found(bob.get(eid))
    assert (await alice.get(eid)).reward == 1.0


async def test_other_principals_cannot_act_on_a_session(keyed: Any) -> None:
    alice, bob = keyed.clients[ALICE_1], keyed.clients[BOB]
    session = await alice.open_session()
    ep = await alice.start(session)

    await _not_found(bob.sessions.Heartbeat(
        s_pb.HeartbeatRequest(session_id=session), metadata=bob.md))
    await _not_found(bob.sessions.DeclareDone(
        s_pb.DeclareDoneRequest(session_id=session), metadata=bob.md))
    await _not_found(bob.start(session))  # no episodes in someone else's session
    # Closing is idempotent (0 for an unknown session), so Bob's close answers the same
    # as for an unknown id, and Alice's session and its episode stay open.
    closed = await bob.sessions.CloseSession(
        s_pb.CloseSessionRequest(session_id=session), metadata=bob.md)
    assert closed.aborted_episodes == 0
    # Re-leasing (reopening) another principal's session id is refused.
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await bob.open_session(session)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    beat = await alice.sessions.Heartbeat(s_pb.HeartbeatRequest(session_id=session),
                                          metadata=alice.md)
    assert beat.open_episodes == 1
    assert (await alice.get(ep.episode_id)).state == t_pb.EPISODE_STATE_OPEN
    # The owner may reopen and close.
    await alice.open_session(session)
    closed = await alice.sessions.CloseSession(
        s_pb.CloseSessionRequest(session_id=session), metadata=alice.md)
    assert closed.aborted_episodes == 1


async def test_start_request_ids_are_scoped_to_their_owner(keyed: Any) -> None:
    alice, alice2, bob = keyed.clients[ALICE_1], keyed.clients[ALICE_2], keyed.clients[BOB]
    a_session, b_session = await alice.open_session(), await bob.open_session()
    a = await alice.start(a_session, request_id="same-id")
    # Bob replaying Alice's request id gets a fresh episode of his own, never hers.
    b = await bob.start(b_session, request_id="same-id")
    assert b.episode_id != a.episode_id and b.openai_api_key != a.openai_api_key
    # The same principal, through its other key, gets its episode back.
    again = await alice2.start(a_session, request_id="same-id")
    assert again.episode_id == a.episode_id
    assert (await bob.start(b_session, request_id="same-id")).episode_id == b.episode_id
    await _not_found(bob.get(a.episode_id))


async def test_admin_may_act_on_any_episode(keyed: Any) -> None:
    alice, admin = keyed.clients[ALICE_1], keyed.clients[ADMIN]
    session = await alice.open_session()
    ep = await alice.start(session)
    assert (await admin.get(ep.episode_id)).episode_id == ep.episode_id
    await admin.sessions.Heartbeat(s_pb.HeartbeatRequest(session_id=session), metadata=admin.md)
    await admin.episodes.AbortEpisode(
        ep_pb.AbortEpisodeRequest(episode_id=ep.episode_id, reason="operator"),
        metadata=admin.md)
    assert (await alice.get(ep.episode_id)).state == t_pb.EPISODE_STATE_ABORTED


async def test_owners_survive_a_restart(make_server: ServerFactory) -> None:
    running = await make_server(http=True, client_keys=(f"alice={ALICE_1}", BOB))
    async with grpc.aio.insecure_channel(running.grpc_target) as channel:
        alice = Client(channel, ALICE_1)
        session = await alice.open_session()
        ep = await alice.start(session, request_id="r1")
    await make_server.stop(running)
    running = await make_server(running.config)  # the same data dir and keys
    async with grpc.aio.insecure_channel(running.grpc_target) as channel:
        alice, bob = Client(channel, ALICE_1), Client(channel, BOB)
        await _not_found(bob.get(ep.episode_id))
        await _not_found(bob.sessions.Heartbeat(
            s_pb.HeartbeatRequest(session_id=session), metadata=bob.md))
        assert (await alice.start(session, request_id="r1")).episode_id == ep.episode_id
        assert (await alice.get(ep.episode_id)).state == t_pb.EPISODE_STATE_OPEN


async def test_over_http_only_the_episode_key_reaches_its_episode(keyed: Any) -> None:
    alice, bob = keyed.clients[ALICE_1], keyed.clients[BOB]
    a = await alice.start(await alice.open_session())
    b = await bob.start(await bob.open_session())
    base = a.openai_base_url
    a_id, b_key = a.episode_id, b.openai_api_key
    # Bob's episode key with Alice's episode id (a forged key), Bob's server key, the
    # admin key and no key: none of them reaches Alice's episode.
    forged = f"sk-swarm-{a_id}.{b_key.rsplit('.', 1)[1]}"
    for key in (forged, BOB, ADMIN, ""):
        client = openai.AsyncOpenAI(base_url=base, api_key=key or "none", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    # Bob's own key generates in Bob's episode only.
    client = openai.AsyncOpenAI(base_url=base, api_key=b_key, max_retries=0)
    await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert len((await alice.get(a_id)).calls) == 0
    assert len((await bob.get(b.episode_id)).calls) == 1
    # The key-in-URL form is held to the same rule.
    url_base = base.replace("/v1", f"/k/{forged}/v1")
    client = openai.AsyncOpenAI(base_url=url_base, api_key="ignored", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert len((await alice.get(a_id)).calls) == 0
