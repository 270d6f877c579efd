"""The SDK's fake server applies the server's request rules, worded the same.

The fake (`swarmrl.testing`) may not import the server, so its sampling and model
rules are restated once, in `swarmrl._fake_model`; this test holds them to the
server's (`episodes.resolve`, `EpisodeRegistry.model_of`): the same bad request is
refused naming the same field with the same message.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from swarmrl import _fake_model as toy
from swarmrl._fake_rpc import _Abort
from swarmrl_proto.v1 import types_pb2
from swarmrl_server.episodes.resolve import GenerationPolicy, SamplingRequest, resolve_sampling
from swarmrl_server.errors import SwarmError

BAD: list[dict[str, Any]] = [
    {"max_tokens": 0},
    {"max_tokens": -3},
    {"temperature": -0.5},
    {"temperature": float("nan")},
    {"top_p": 0.0},
    {"top_p": 1.5},
    {"top_logprobs": toy.MAX_TOP_LOGPROBS + 1},
    {"stop": [""]},
    {"stop": ["x" * (toy.MAX_STOP_CHARS + 1)]},
    {"stop": ["a"] * (toy.MAX_STOP + 1)},
    {"stop_token_ids": [toy.VOCAB]},
    {"temperature": -1.0, "top_p": 0.0},  # the first rule broken is the one named
    {"top_p": 0.5},  # the fake's models are trainable: no nucleus
    {"top_p": 0.5, "temperature": 0.7},
]


@pytest.mark.parametrize("fields", BAD, ids=[str(f)[:40] for f in BAD])
def test_the_fake_refuses_bad_sampling_as_the_server_does(fields: dict[str, Any]) -> None:
    with pytest.raises(_Abort) as fake:
        toy.check_sampling(types_pb2.SamplingParams(**fields))
    request = SamplingRequest(**{k: tuple(v) if isinstance(v, list) else v
                                 for k, v in fields.items()})
    engine = SimpleNamespace(vocab_size=toy.VOCAB)
    with pytest.raises(SwarmError) as real:
        resolve_sampling(request, GenerationPolicy(), engine,  # type: ignore[arg-type]
                         trainable=True)
    assert fake.value.extra["field"] == real.value.field
    assert str(fake.value) == real.value.message


def test_the_fake_serves_what_the_server_serves_a_trainable_model() -> None:
    engine = SimpleNamespace(vocab_size=toy.VOCAB)
    for fields in ({"top_p": 0.5, "temperature": 0.0}, {"top_p": 1.0}, {"temperature": 0.5}):
        toy.check_sampling(types_pb2.SamplingParams(**fields))  # type: ignore[arg-type]
        resolve_sampling(SamplingRequest(**fields), GenerationPolicy(), engine,  # type: ignore[arg-type]
                         trainable=True)


@pytest.mark.parametrize("model", ["nope", "other"])
def test_the_fake_refuses_a_model_as_the_server_does(model: str) -> None:
    with pytest.raises(_Abort) as fake:
        toy.model_of(["tiny"], model, ["tiny", "other"])
    assert fake.value.code.name == "NOT_FOUND" and fake.value.reason == "MODEL_NOT_FOUND"
    assert fake.value.extra["field"] == "model"
    assert str(fake.value) == "model: " + repr(model) + " is not one of this episode's models " \
        "['tiny']"
    assert toy.model_of(["tiny"], "", ["tiny"]) == "tiny"
