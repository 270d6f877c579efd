"""The call path is typed from each door to the engine: no `Any` on the way.

mypy --strict (tests/test_types.py) checks what is written; this test checks what is
declared, so an `Any` (or a `**call` of keyword arguments) put back on the seam between
a door and the engine fails here even where mypy would accept it. It walks the resolved
type hints of every signature and value type a call passes through: each door's plan
(its `Plan[Request]` of `GenerateCall`s), gRPC's Generate conversion, the registry's and
the call path's `generate`, `resolve` and what the engine runs.

The one exemption is the chat message payload (`episodes.chat.Message`), OpenAI-shaped
JSON that `chat.validate_messages` checks field by field; it is recognised by identity,
so any other `dict[str, Any]` still fails.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, get_args, get_origin, get_type_hints

import grpc
import pytest

from swarmrl_server.engine.base import Engine, SamplingParams
from swarmrl_server.episodes import chat
from swarmrl_server.episodes.call_path import CallPath, GenerateCall
from swarmrl_server.episodes.registry import EpisodeRegistry
from swarmrl_server.episodes.resolve import ResolvedRequest, SamplingRequest, resolve
from swarmrl_server.grpc.servicers import EpisodeServicer
from swarmrl_server.http.chat_completion.serving import OpenAIServingChat
from swarmrl_server.http.completion.serving import OpenAIServingCompletion
from swarmrl_server.http.messages.serving import AnthropicServingMessages
from swarmrl_server.http.responses.serving import OpenAIServingResponses
from swarmrl_server.http.serving import Plan, ServingGeneration

LOCALS = {"Json": chat.Json, "grpc": grpc, "Any": Any}
"""Names that string annotations use without importing them (the recursive JSON alias,
gRPC's context alias)."""
DOORS = [OpenAIServingChat, OpenAIServingCompletion, AnthropicServingMessages,
         OpenAIServingResponses]


def anys(hint: object, where: str) -> list[str]:
    """Where `Any` occurs in `hint` (an empty list when it does not)."""
    if hint is chat.Message:
        return []
    if hint is Any:
        return [where]
    found: list[str] = []
    for i, arg in enumerate(get_args(hint)):
        found += anys(arg, f"{where}[{i}]")
    return found


def signature_anys(fn: Callable[..., object], skip: tuple[str, ...] = ()) -> list[str]:
    name = fn.__qualname__
    sig = inspect.signature(fn)
    found = [f"{name}(**{p.name})" for p in sig.parameters.values()
             if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    hints = get_type_hints(fn, localns=LOCALS)
    for param in [*sig.parameters, "return"]:
        if param in ("self", *skip):
            continue
        assert param in hints, f"{name}: {param} is not annotated"
        found += anys(hints[param], f"{name}: {param}")
    return found


def field_anys(cls: type, only: tuple[str, ...] = ()) -> list[str]:
    hints = get_type_hints(cls, localns=LOCALS)
    names = only or tuple(f.name for f in dataclasses.fields(cls))
    return [a for n in names for a in anys(hints[n], f"{cls.__name__}.{n}")]


def test_the_call_and_what_it_becomes_hold_no_any() -> None:
    found = (field_anys(GenerateCall) + field_anys(SamplingRequest)
             + field_anys(SamplingParams)
             # What the engine runs; the chat record and overrides go to the store.
             + field_anys(ResolvedRequest, ("prompt_ids", "params")))
    assert found == []


@pytest.mark.parametrize("fn", [
    EpisodeRegistry.generate, CallPath.generate, resolve, Engine.generate,
    EpisodeServicer._call_of,
], ids=lambda f: f.__qualname__)
def test_each_step_of_the_path_is_typed(fn: Callable[..., object]) -> None:
    # gRPC's context is grpc.aio's own type (its stubs say Any); the request is the proto.
    assert signature_anys(fn, skip=("context",)) == []


@pytest.mark.parametrize("door", DOORS, ids=lambda d: d.__name__)
def test_each_door_plans_typed_calls_for_its_own_request(door: type) -> None:
    [base] = [b for b in door.__orig_bases__ if get_origin(b) is ServingGeneration]
    [request] = get_args(base)
    assert isinstance(request, type) and request.__module__.startswith("swarmrl_server.http")
    hints = get_type_hints(door.plan)
    assert hints["req"] is request
    assert hints["return"] == Plan[request]
    assert get_type_hints(Plan)["calls"] == list[GenerateCall]


def test_the_walk_finds_an_any() -> None:
    """The check itself: an `Any` anywhere in a hint is found, the message payload is not."""
    assert anys(dict[str, Any], "x") == ["x[1]"]
    assert anys(list[dict[str, Any]] | None, "x") == ["x[0][0][1]"]
    assert anys(list[chat.Message] | None, "x") == []

    def loose(episode_id: str, **call: Any) -> None: ...

    assert signature_anys(loose) == ["test_the_walk_finds_an_any.<locals>.loose(**call)",
                                     "test_the_walk_finds_an_any.<locals>.loose: call"]
