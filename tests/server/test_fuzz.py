"""Fuzzing both doors of a server process with hypothesis.

gRPC: valid requests of every client RPC, and their serialized bytes mutated
(truncated, bytes flipped, spliced, random), sent as raw bytes through a generic
channel call. HTTP: chat, completion and Anthropic bodies with unicode edge cases
(lone surrogates, NULs, astral characters, huge numbers, wrong JSON types) and
invalid UTF-8 bytes. The property, for every input: the server answers with a
documented code (never UNKNOWN / INTERNAL / 5xx), stays up, and a refused request
leaves the store exactly as it was (no episode, call or reward half written).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import duration_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarmrl_proto.v1 import episode_service_pb2 as ep_pb
from swarmrl_proto.v1 import episode_service_pb2_grpc as ep_grpc
from swarmrl_proto.v1 import session_service_pb2 as s_pb
from swarmrl_proto.v1 import session_service_pb2_grpc as s_grpc
from swarmrl_proto.v1 import types_pb2 as t_pb
from tests.helpers import ServerProcess, free_port

pytestmark = pytest.mark.slow

DOCUMENTED_GRPC = {
    grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.ALREADY_EXISTS,
}
DOCUMENTED_HTTP = {200, 400, 401, 404, 409, 413, 422, 429}
FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=list(HealthCheck))


class Target:
    def __init__(self, server: ServerProcess, episode_id: str, key: str, session: str) -> None:
        self.server, self.episode_id, self.key, self.session = server, episode_id, key, session
        self.channel = grpc.insecure_channel(server.target)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{server.http_port}", timeout=60)
        self.db = server.data_dir / "swarm.sqlite3"
        self.counts: dict[str, int] = {}

    def state(self) -> tuple[Any, ...]:
        """Everything a request could half-write: episodes with their state and reward,
        calls with theirs, sessions."""
        with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True) as c:
            return (c.execute("SELECT episode_id, state, reward FROM episodes ORDER BY 1").fetchall(),
                    c.execute("SELECT call_id, reward FROM calls ORDER BY 1").fetchall(),
                    c.execute("SELECT session_id FROM sessions ORDER BY 1").fetchall())

    def alive(self) -> None:
        assert self.http.get("/health").status_code == 200
        s_grpc.SessionServiceStub(self.channel).Heartbeat(
            s_pb.HeartbeatRequest(session_id=self.session))


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory, model_cache: Path,
           tiny_model_dir: Path) -> Iterator[Target]:
    tmp = tmp_path_factory.mktemp("fuzz")
    server = ServerProcess(data_dir=tmp / "data", cache_dir=model_cache, http_port=free_port(),
                           extra=["--default-max-tokens", "3"]).start()
    try:
        with grpc.insecure_channel(server.target) as channel:
            s_grpc.SessionServiceStub(channel).OpenSession(s_pb.OpenSessionRequest(
                session_id="fuzz", client_name="fuzz", lease=duration_pb2.Duration(seconds=600)))
            ep = ep_grpc.EpisodeServiceStub(channel).StartEpisode(
                ep_pb.StartEpisodeRequest(session_id="fuzz", task_id="t"))
        t = Target(server, ep.episode_id, ep.openai_api_key, "fuzz")
        yield t
        t.alive()
        print(f"fuzz answers: {dict(sorted(t.counts.items()))}")
    finally:
        server.stop()


# -- gRPC --------------------------------------------------------------------------

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)  # protobuf: valid UTF-8


def _ids(target_id: str) -> st.SearchStrategy[str]:
    return st.one_of(st.just(target_id), TEXT, st.just(""))


def requests(t: Target) -> st.SearchStrategy[tuple[str, bytes]]:
    eid = _ids(t.episode_id)
    msg = st.builds(t_pb.ChatMessage, role=st.sampled_from(list(t_pb.Role.values())),
                    content=TEXT)
    sampling = st.builds(t_pb.SamplingParams, max_tokens=st.integers(-5, 4),
                         temperature=st.floats(allow_nan=True, allow_infinity=True),
                         stop=st.lists(TEXT, max_size=3),
                         top_logprobs=st.integers(-3, 30))
    generate = st.one_of(
        st.builds(lambda e, m, s, r: ep_pb.GenerateRequest(
            episode_id=e, chat=ep_pb.ChatInput(messages=m), sampling=s, request_id=r),
            eid, st.lists(msg, max_size=3), sampling, TEXT),
        st.builds(lambda e, ids, s: ep_pb.GenerateRequest(
            episode_id=e, tokens=ep_pb.TokenInput(token_ids=ids), sampling=s),
            eid, st.lists(st.integers(0, 2**32 - 1), max_size=5), sampling),
    )
    valid = st.one_of(
        st.tuples(st.just("EpisodeService/Generate"), generate),
        st.tuples(st.just("EpisodeService/StartEpisode"), st.builds(
            ep_pb.StartEpisodeRequest, session_id=_ids(t.session), task_id=TEXT,
            request_id=TEXT, labels=st.dictionaries(TEXT, TEXT, max_size=3))),
        st.tuples(st.just("EpisodeService/SubmitReward"), st.builds(
            ep_pb.SubmitRewardRequest, episode_id=eid,
            value=st.floats(allow_nan=True, allow_infinity=True), call_id=TEXT)),
        st.tuples(st.just("EpisodeService/GetEpisode"), st.builds(
            ep_pb.GetEpisodeRequest, episode_id=eid, include_calls=st.booleans())),
        st.tuples(st.just("EpisodeService/AbortEpisode"), st.builds(
            ep_pb.AbortEpisodeRequest, episode_id=st.one_of(TEXT, st.just("")), reason=TEXT)),
        st.tuples(st.just("SessionService/Heartbeat"), st.builds(
            s_pb.HeartbeatRequest, session_id=TEXT)),
        st.tuples(st.just("SessionService/OpenSession"), st.builds(
            s_pb.OpenSessionRequest, session_id=TEXT, client_name=TEXT)),
        st.tuples(st.just("SessionService/DeclareDone"), st.builds(
            s_pb.DeclareDoneRequest, session_id=TEXT, model=TEXT)),
    ).map(lambda mr: (mr[0], mr[1].SerializeToString()))

    def mutate(raw: bytes, data: st.DataObject) -> bytes:
        kind = data.draw(st.sampled_from(["truncate", "flip", "splice", "random", "asis"]))
        if kind == "truncate" and raw:
            return raw[: data.draw(st.integers(0, len(raw) - 1))]
        if kind == "flip" and raw:
            i = data.draw(st.integers(0, len(raw) - 1))
            return raw[:i] + bytes([raw[i] ^ data.draw(st.integers(1, 255))]) + raw[i + 1:]
        if kind == "splice":
            i = data.draw(st.integers(0, len(raw)))
            return raw[:i] + data.draw(st.binary(max_size=12)) + raw[i:]
        if kind == "random":
            return data.draw(st.binary(max_size=64))
        return raw

    return st.tuples(valid, st.data()).map(lambda v: (v[0][0], mutate(v[0][1], v[1])))


def test_fuzz_grpc_door(target: Target) -> None:
    @FUZZ
    @given(st.data())
    def run(data: st.DataObject) -> None:
        method, raw = data.draw(requests(target))
        before = target.state()
        call: Any = (target.channel.unary_stream if method.endswith("Generate")
                     else target.channel.unary_unary)(f"/swarmrl.v1.{method}")
        try:
            response = call(raw, timeout=60)
            if method.endswith("Generate"):
                list(response)
            code = grpc.StatusCode.OK
        except grpc.RpcError as err:
            code = err.code()
            assert code in DOCUMENTED_GRPC, (method, raw, code, err.details())
        target.counts[f"grpc {code.name}"] = target.counts.get(f"grpc {code.name}", 0) + 1
        if code != grpc.StatusCode.OK:
            assert target.state() == before, (method, raw, code)

    run()
    target.alive()
    assert sum(v for k, v in target.counts.items() if k.startswith("grpc")) >= 200


# -- HTTP --------------------------------------------------------------------------

EDGE = st.text(st.one_of(
    st.characters(),  # any code point, lone surrogates included
    st.sampled_from(["\ud800", "\udfff", "\x00", "\ufeff", "\u202e", "\U0001f600", "\ufffd"]),
), max_size=30)
JSON_ANY = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
              st.floats(allow_nan=False), EDGE),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(EDGE, inner, max_size=3)),
    max_leaves=8,
)


def bodies() -> st.SearchStrategy[tuple[str, bytes]]:
    message = st.fixed_dictionaries(
        {"role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), EDGE),
         "content": st.one_of(EDGE, JSON_ANY)},
        optional={"tool_call_id": EDGE, "name": EDGE})
    common = {"model": st.one_of(st.just("tiny"), EDGE),
              "max_tokens": st.one_of(st.integers(-3, 3), JSON_ANY)}
    chat = st.fixed_dictionaries(
        {**common, "messages": st.one_of(st.lists(message, max_size=3), JSON_ANY)},
        optional={"stop": st.one_of(EDGE, st.lists(EDGE, max_size=3)),
                  "temperature": JSON_ANY, "n": st.integers(-1, 3),
                  "tools": st.one_of(JSON_ANY, st.lists(st.fixed_dictionaries(
                      {"type": st.just("function"), "function": st.fixed_dictionaries(
                          {"name": EDGE, "parameters": JSON_ANY})}), max_size=2))})
    completion = st.fixed_dictionaries(
        {**common, "prompt": st.one_of(EDGE, st.lists(st.integers(-5, 2**40), max_size=4),
                                       JSON_ANY)})
    encoded = st.one_of(
        st.tuples(st.just("/v1/chat/completions"), chat),
        st.tuples(st.just("/v1/completions"), completion),
        st.tuples(st.just("/v1/messages"), chat),
    ).map(lambda pb: (pb[0], json.dumps(pb[1]).encode()))

    def corrupt(pb: tuple[str, bytes], data: st.DataObject) -> tuple[str, bytes]:
        path, body = pb
        if data.draw(st.integers(0, 4)) == 0 and body:  # invalid UTF-8 / broken JSON
            i = data.draw(st.integers(0, len(body) - 1))
            body = body[:i] + data.draw(st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\xc3"])) \
                + body[i:]
        return path, body

    return st.tuples(encoded, st.data()).map(lambda v: corrupt(v[0], v[1]))


def test_fuzz_http_door(target: Target) -> None:
    headers = {"authorization": f"Bearer {target.key}", "x-api-key": target.key,
               "content-type": "application/json"}

    @FUZZ
    @given(st.data())
    def run(data: st.DataObject) -> None:
        path, body = data.draw(bodies())
        before = target.state()
        r = target.http.post(path, content=body, headers=headers)
        assert r.status_code in DOCUMENTED_HTTP, (path, body[:300], r.status_code, r.text[:300])
        if r.status_code != 200:
            assert "error" in r.json()
            assert target.state() == before, (path, body[:300])
        key = f"http {r.status_code}"
        target.counts[key] = target.counts.get(key, 0) + 1

    run()
    target.alive()
    assert sum(v for k, v in target.counts.items() if k.startswith("http")) >= 200
