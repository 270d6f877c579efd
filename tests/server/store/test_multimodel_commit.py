"""Atomic multi-model commit: an episode of two models is queued for both trainers in
one store transaction, so a server SIGKILLed between the two models' writes leaves it
queued for neither, and neither model ever trains half of it."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

import swarmrl
from swarmrl_proto.v1 import episode_service_pb2 as ep_pb
from swarmrl_proto.v1 import episode_service_pb2_grpc as ep_grpc
from tests.helpers import ServerProcess, wait_until

pytestmark = pytest.mark.slow  # three server processes

MODELS = ["--model", "proposer=tiny", "--model", "solver=tiny:1"]
SAMPLING: dict[str, Any] = {"max_tokens": 3}


def play(client: swarmrl.SwarmClient, task: str) -> swarmrl.Episode:
    """An open episode that called both models."""
    ep = client.start_episode(task, models=["proposer", "solver"])
    ep.chat([{"role": "user", "content": "ask"}], model="proposer", **SAMPLING)
    ep.chat([{"role": "user", "content": "solve"}], model="solver", **SAMPLING)
    return ep


def queue_rows(db: Path, episode_id: str) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT model, queued FROM episode_models WHERE episode_id=? ORDER BY model",
            (episode_id,)).fetchall()


def episode_state(db: Path, episode_id: str) -> str:
    with sqlite3.connect(db) as conn:
        return str(conn.execute("SELECT state FROM episodes WHERE episode_id=?",
                                (episode_id,)).fetchone()[0])


def test_sigkill_between_two_models_writes_leaves_neither(
    tmp_path: Path, model_cache: Path
) -> None:
    data_dir = tmp_path / "data"
    db = data_dir / "swarm.sqlite3"
    marker = tmp_path / "between-writes"
    # The store blocks after the first model's queue write (its on_model_queued seam).
    crashing = [sys.executable, "-m", "tests.crash_server", str(marker)]
    server = ServerProcess(data_dir=data_dir, cache_dir=model_cache, extra=MODELS,
                           command=crashing).start()
    config = swarmrl.ClientConfig(target=server.target, retry=None)
    try:
        with swarmrl.SwarmClient(config=config) as client:
            half = play(client, "half")
            # EndEpisode on a raw channel (the SDK would retry it once the server is back).
            channel = grpc.insecure_channel(server.target)
            ending = ep_grpc.EpisodeServiceStub(channel).EndEpisode.future(
                ep_pb.EndEpisodeRequest(episode_id=half.id, reward=1.0, request_id="end-half"))
            wait_until(marker.exists, 30, "the server to queue the first model")
            server.kill()  # SIGKILL with the first model written, the second not
            with pytest.raises(grpc.RpcError):
                ending.result(timeout=30)
            channel.close()
            client.close()
    finally:
        server.kill()
    # Neither model has it queued, and the episode is still open (not ended) on disk.
    assert queue_rows(db, half.id) == [] and episode_state(db, half.id) == "open"

    server = ServerProcess(
        data_dir=data_dir, cache_dir=model_cache, port=server.port,
        extra=[*MODELS, "--train", "--train-option", "progress=false",
               "--train-option", "batch_rule=episodes", "--train-option", "batch_size=1",
               "--train-option", "group_size=1", "--train-option", "checkpoint_on_stop=false"],
    ).start()
    try:
        with swarmrl.SwarmClient(config=swarmrl.ClientConfig(target=server.target)) as client:
            whole = play(client, "whole")
            whole.end(0.5, model_rewards={"proposer": 1.0})
            assert queue_rows(db, whole.id) == [("proposer", 1), ("solver", 1)]
            # The interrupted episode is still open after the restart; aborting it keeps it
            # out of every queue for good.
            assert client.get_episode(half.id).state == "open"
            with grpc.insecure_channel(server.target) as channel:
                ep_grpc.EpisodeServiceStub(channel).AbortEpisode(
                    ep_pb.AbortEpisodeRequest(episode_id=half.id, reason="test"), timeout=30)
            assert client.get_episode(half.id).state == "aborted"
            metrics = data_dir / "metrics.jsonl"

            def trained() -> list[dict[str, Any]]:
                if not metrics.exists():
                    return []
                return [json.loads(line) for line in metrics.read_text().splitlines()]

            wait_until(lambda: {r["model"] for r in trained()} == {"proposer", "solver"}, 60,
                       "both trainers to take a step")
    finally:
        server.stop()
    rows = trained()
    # Each model trained exactly the one whole episode, with its own reward.
    assert sorted((r["model"], r["reward/episodes"], r["reward/mean"]) for r in rows) == [
        ("proposer", 1, 1.0), ("solver", 1, 0.5)]
    assert queue_rows(db, half.id) == []
    with sqlite3.connect(db) as conn:
        consumed = conn.execute("SELECT episode_id, model FROM consumed ORDER BY model").fetchall()
    assert consumed == [(whole.id, "proposer"), (whole.id, "solver")]
