"""The fake server keeps holds of training as the server does: leases, one per holder,
bound to the SDK client's session, listed by GetStatus, gone with the session; and it
refuses a lease the server refuses, naming the same field with the same message."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import duration_pb2

import swarmrl
from swarmrl.testing import FakeSwarmServer
from swarmrl_proto.v1 import admin_service_pb2 as admin_pb
from swarmrl_proto.v1 import admin_service_pb2_grpc as admin_grpc
from swarmrl_server.errors import SwarmError
from swarmrl_server.trainer.holds import check_binding


async def test_the_fake_binds_a_hold_to_the_clients_session_and_lists_it() -> None:
    async with FakeSwarmServer() as fake:
        async with swarmrl.AsyncSwarmClient(fake.target) as watcher:
            async with swarmrl.AsyncSwarmClient(fake.target) as holder:
                await holder.hold_training(holder="run-a", reason="val")
                await holder.hold_training(holder="run-a", reason="val again")
                [hold] = (await watcher.status()).holds
                assert (hold.model, hold.holder, hold.reason, hold.session_id) == (
                    "fake-model", "run-a", "val", holder.session_id)
            assert (await watcher.status()).holds == []  # closed with its session
            await watcher.hold_training(holder="run-b")
            await watcher.release_training(holder="run-b")
            assert (await watcher.status()).holds == []


@pytest.mark.parametrize("session, lease", [("s", 5.0), ("", 0.5), ("", 601.0)])
async def test_the_fake_refuses_a_lease_as_the_server_does(session: str, lease: float) -> None:
    with pytest.raises(SwarmError) as real:
        check_binding(session, lease, live_sessions=())
    request = admin_pb.HoldTrainingRequest(holder="h", session_id=session,
                                           lease=duration_pb2.Duration(
                                               seconds=int(lease), nanos=int(lease % 1 * 1e9)))
    async with FakeSwarmServer() as fake, grpc.aio.insecure_channel(fake.target) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await admin_grpc.AdminServiceStub(channel).HoldTraining(request)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == real.value.message and real.value.field == "lease"


async def test_a_hold_reopens_a_session_the_server_forgot() -> None:
    """A restarted server forgot the client's session (and its holds): holding again
    reopens the session, as starting an episode does, and binds the new hold to it."""
    async with FakeSwarmServer() as fake, swarmrl.AsyncSwarmClient(fake.target) as client:
        await client.hold_training(holder="run-a")
        fake.drop_sessions()
        assert (await client.status()).holds == []
        await client.hold_training(holder="run-a")
        [hold] = (await client.status()).holds
        assert hold.session_id == client.session_id
