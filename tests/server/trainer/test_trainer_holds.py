"""Holds of training are leases (`swarmrl_server.trainer.holds`), on a real in-process server.

A hold bound to a session lapses when the session's lease does, and training goes on; a
hold on a lease of its own lasts while its holder holds again and lapses when it stops;
holding again as the same holder keeps one hold and re-binds it to the new session;
GetStatus, the SDK's `ServerStatus.holds`, ``/metrics`` and `swarmrl top` list holds;
each lapse is counted. Bad bindings are refused naming the field.
"""

from __future__ import annotations

import asyncio
import io
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2
from rich.console import Console

import swarmrl
from swarmrl._top import main as top_main
from swarmrl_proto.v1 import admin_service_pb2 as admin_pb
from swarmrl_proto.v1 import admin_service_pb2_grpc as admin_grpc
from swarmrl_proto.v1 import session_service_pb2 as s_pb
from swarmrl_proto.v1 import session_service_pb2_grpc as s_grpc
from tests.grpc_support import details
from tests.helpers import assert_eventually, wait_for_step
from tests.server_fixtures import ServerFactory

TRAIN = {"batch_rule": "groups", "group_size": "2", "batch_size": "1", "lr": "1e-3",
         "progress": "false", "checkpoint_every": "0", "checkpoint_on_stop": "false"}


def _seconds(s: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(s * 1e9))
    return d


class Admin:
    """Raw stubs: sessions opened and holds taken exactly as the request says."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.sessions = s_grpc.SessionServiceStub(channel)
        self.admin = admin_grpc.AdminServiceStub(channel)

    async def open_session(self, lease_s: float) -> str:
        session_id = uuid.uuid4().hex
        await self.sessions.OpenSession(s_pb.OpenSessionRequest(
            session_id=session_id, client_name="holder", lease=_seconds(lease_s)))
        return session_id

    async def hold(self, holder: str, reason: str = "eval", **kw: Any
                   ) -> admin_pb.HoldTrainingResponse:
        return await self.admin.HoldTraining(
            admin_pb.HoldTrainingRequest(holder=holder, reason=reason, **kw))

    async def holds(self) -> list[admin_pb.TrainingHold]:
        return list((await self.admin.GetStatus(admin_pb.GetStatusRequest())).holds)


@pytest.fixture
async def running(make_server: ServerFactory) -> Any:
    return await make_server(train=TRAIN)


@pytest.fixture
async def stubs(running: Any) -> AsyncIterator[Admin]:
    async with grpc.aio.insecure_channel(running.grpc_target) as channel:
        yield Admin(channel)


def _metric(running: Any, name: str, **labels: str) -> float:
    value = running.swarm.telemetry.registry.get_sample_value(name, {"model": "tiny", **labels})
    return 0.0 if value is None else float(value)


def _lapsed(running: Any, cause: str) -> float:
    return _metric(running, "swarmrl_training_holds_lapsed_total", cause=cause)


async def _play_group(client: swarmrl.AsyncSwarmClient) -> None:
    """One group of two episodes with different rewards: a batch the trainer steps on."""
    for i in range(2):
        async with client.episode(task_id="t", group_id="g") as ep:
            await ep.chat([{"role": "user", "content": "go"}], max_tokens=2, seed=i)
            await ep.reward(float(i))


async def test_a_hold_lapses_with_its_session_and_training_goes_on(
        running: Any, stubs: Admin) -> None:
    trainer = running.swarm.models["tiny"].trainer
    session = await stubs.open_session(lease_s=1.0)

    async def heartbeat() -> None:  # the holder alive: its lease renewed thrice a lease
        while True:
            await stubs.sessions.Heartbeat(s_pb.HeartbeatRequest(session_id=session))
            await asyncio.sleep(0.3)

    beating = asyncio.create_task(heartbeat())
    held = await stubs.hold("evaluator", "pinned val", session_id=session)
    assert (held.hold.holder, held.hold.session_id, held.hold.reason) == (
        "evaluator", session, "pinned val")
    async with swarmrl.AsyncSwarmClient(running.grpc_target) as feeder:
        await _play_group(feeder)  # a batch, ready while the hold lasts
        assert trainer.step == 0
        assert [h.holder for h in await stubs.holds()] == ["evaluator"]
        assert _metric(running, "swarmrl_training_holds") == 1.0
        assert _metric(running, "swarmrl_training_hold_oldest_age_seconds") > 0.0
        beating.cancel()  # the holder dies: nothing renews its session
        await asyncio.gather(beating, return_exceptions=True)
        died = time.monotonic()
        await wait_for_step(trainer, 1, timeout=60)
    # The session's lease (1 s) ran out, the reaper closed it and the hold lapsed with it.
    print(f"\nsession lease 1 s: trained again {time.monotonic() - died:.1f} s after the "
          "last heartbeat")
    assert await stubs.holds() == [] and trainer.holds == {}
    assert _lapsed(running, "session") == 1.0 and _lapsed(running, "lease") == 0.0
    assert _metric(running, "swarmrl_training_holds") == 0.0


async def test_a_hold_on_its_own_lease_lasts_while_renewed_and_lapses_after(
        running: Any, stubs: Admin) -> None:
    first = await stubs.hold("script", "nightly eval", lease=_seconds(1.0))
    assert first.hold.session_id == "" and first.hold.HasField("lease_expire_time")
    renewed_until = first.hold.lease_expire_time.ToNanoseconds()
    for _ in range(6):  # 1.8 s of renewals, well past one lease
        await asyncio.sleep(0.3)
        again = await stubs.hold("script", "another reason", lease=_seconds(1.0))
        # The same hold (never a lapse and a new one), its lease pushed on.
        assert again.hold.hold_time == first.hold.hold_time
        assert again.hold.reason == "nightly eval"
        assert again.hold.lease_expire_time.ToNanoseconds() > renewed_until
        renewed_until = again.hold.lease_expire_time.ToNanoseconds()
        assert _lapsed(running, "lease") == 0.0
    assert [h.holder for h in await stubs.holds()] == ["script"]
    stopped = time.monotonic()

    async def lapsed() -> None:  # no more renewals: dropped, counted, no longer listed
        assert _lapsed(running, "lease") == 1.0
        assert await stubs.holds() == []

    await assert_eventually(lapsed, timeout=5.0)
    assert 0.5 < time.monotonic() - stopped < 5.0
    assert running.swarm.models["tiny"].trainer.holds == {}


async def test_holding_again_keeps_one_hold_and_binds_it_to_the_new_session(
        running: Any, stubs: Admin) -> None:
    """A resumed run (same holder, a new session) adopts its hold: the old session's end
    no longer lifts it, the new one's does."""
    old, new = await stubs.open_session(30.0), await stubs.open_session(30.0)
    first = await stubs.hold("run-7f3a", "val before", session_id=old)
    again = await stubs.hold("run-7f3a", "val again", session_id=new)
    assert again.hold.session_id == new and again.hold.hold_time == first.hold.hold_time
    [hold] = await stubs.holds()
    assert (hold.holder, hold.session_id, hold.reason) == ("run-7f3a", new, "val before")
    await stubs.sessions.CloseSession(s_pb.CloseSessionRequest(session_id=old))
    assert [h.session_id for h in await stubs.holds()] == [new]
    await stubs.sessions.CloseSession(s_pb.CloseSessionRequest(session_id=new))
    assert await stubs.holds() == []
    assert _lapsed(running, "session") == 1.0


async def test_the_sdk_binds_its_hold_to_its_session_and_lists_it(running: Any) -> None:
    target = running.grpc_target
    async with swarmrl.AsyncSwarmClient(target) as watcher:
        async with swarmrl.AsyncSwarmClient(target) as holder:
            state = await holder.hold_training(holder="run-a", reason="evaluating val")
            assert state == swarmrl.TrainingState("tiny", 0, 0)
            [hold] = (await watcher.status()).holds
            assert isinstance(hold, swarmrl.TrainingHold)
            assert (hold.model, hold.holder, hold.reason, hold.session_id) == (
                "tiny", "run-a", "evaluating val", holder.session_id)
            assert hold.hold_time is not None and hold.lease_expire_time is not None
            assert hold.age >= 0.0 and hold.lease_expire_time > hold.hold_time
            out = io.StringIO()
            code = await asyncio.to_thread(
                top_main, ["--target", target, "--once", "--interval", "0.1"],
                console=Console(file=out, width=200, color_system=None))
            assert code == 0
            rows = [[c.strip() for c in line.strip("│ ").split("│")]
                    for line in out.getvalue().splitlines()]
            row = next(r for r in rows if "run-a" in r)
            assert row[:4] == ["tiny", "run-a", "evaluating val", holder.session_id]
        # The holder closed its session: its hold went with it.
        assert (await watcher.status()).holds == []


async def test_a_hold_is_refused_a_lease_it_cannot_have(running: Any, stubs: Admin) -> None:
    session = await stubs.open_session(30.0)
    cases = [({"session_id": session, "lease": _seconds(5.0)}, "INVALID_ARGUMENT", "lease"),
             ({"lease": _seconds(0.5)}, "INVALID_ARGUMENT", "lease"),
             ({"lease": _seconds(601.0)}, "INVALID_ARGUMENT", "lease"),
             ({"session_id": "no-such-session"}, "NOT_FOUND", "")]
    for fields, code, field in cases:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stubs.hold("h", **fields)
        assert err.value.code().name == code
        reason, named = details(err.value)
        assert named == field
        if code == "NOT_FOUND":
            assert reason == "SESSION_NOT_FOUND"
    assert await stubs.holds() == []
