"""The toy model of the fake server in `swarmrl.testing`, its request checks and records.

Token ids are UTF-8 bytes plus an end token (`EOS_TOKEN_ID`); a chat renders as
``<|role|>content\\n`` per message then ``<|assistant|>``. The sampling checks read their
limits from the contract (`types_pb2.RequestLimit`), the same numbers the server
enforces. Private; kept apart so the fake's services read on their own.
"""

from __future__ import annotations

import codecs
import json
import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import grpc

from swarmrl._convert import ROLE_NAMES
from swarmrl._fake_rpc import _Abort, _invalid
from swarmrl_proto.v1 import admin_service_pb2 as apb
from swarmrl_proto.v1 import episode_service_pb2 as epb
from swarmrl_proto.v1 import types_pb2

EOS_TOKEN_ID = 256
"""The fake model's end-of-turn token; ids below it are UTF-8 bytes."""
VOCAB = EOS_TOKEN_ID + 1

MAX_STOP = types_pb2.REQUEST_LIMIT_MAX_STOP
MAX_STOP_CHARS = types_pb2.REQUEST_LIMIT_MAX_STOP_CHARS
MAX_TOP_LOGPROBS = types_pb2.REQUEST_LIMIT_MAX_TOP_LOGPROBS


@dataclass
class Episode:
    """An episode the fake server holds: its record, session and calls."""

    record: epb.Episode
    session_id: str
    calls: list[epb.CallRecord] = field(default_factory=list)


def live_snapshot(
    instance: str, versions: dict[str, int], episodes: Iterable[Episode]
) -> apb.LiveSnapshot:
    """GetLiveSnapshot's answer for the toy models and the open episodes (no trainer,
    no totals, no errors: the fake keeps none)."""
    now = time.time()
    open_ = [ep for ep in episodes if ep.record.state == types_pb2.EPISODE_STATE_OPEN]
    live = apb.LiveSnapshot(server_instance=instance, time=now)
    live.episodes.open = len(open_)
    live.models.extend(apb.LiveModel(name=name, policy_version=version, trainable=True)
                       for name, version in versions.items())
    for ep in open_:
        r, age = ep.record, now - ep.record.start_time.ToSeconds()
        live.open_episodes.add(episode_id=r.episode_id, task_id=r.task_id,
                               agent_version=r.agent_version, models=r.models,
                               session_id=ep.session_id, calls=len(ep.calls), age_s=age)
    return live


def model_infos(versions: dict[str, int]) -> list[types_pb2.ModelInfo]:
    """What ListModels tells of each toy model, at its policy version."""
    return [
        types_pb2.ModelInfo(
            name=name,
            policy_version=version,
            max_model_len=4096,
            vocab_size=VOCAB,
            trainable=True,
            source="swarmrl.testing",
        )
        for name, version in versions.items()
    ]


def model_of(episode_models: Sequence[str], model: str, hosted: Iterable[str]) -> str:
    """The server's model rule (`EpisodeRegistry.model_of`): "" is the episode's first;
    a name not hosted or not the episode's is NOT_FOUND (MODEL_NOT_FOUND) naming "model"."""
    name = model or episode_models[0]
    if name not in hosted or name not in episode_models:
        raise _Abort(grpc.StatusCode.NOT_FOUND, "MODEL_NOT_FOUND",
                     f"model: {name!r} is not one of this episode's models "
                     f"{list(episode_models)}", field="model", metadata={"model": name})
    return name


def _refuse(field_name: str, rule: str) -> _Abort:
    return _invalid(field_name, f"{field_name}: {rule}")  # worded as the server's `invalid`


def check_sampling(sampling: types_pb2.SamplingParams) -> None:
    """The server's sampling rule (the server's `limits.check_sampling`, then the rule of a
    trainable model, as `episodes.resolve` applies them): the same checks in the same
    order, naming the same field with the same message, on the values sent (defaults
    filled in).

    Why it is restated here: the fake has no server to ask, and the SDK may import
    nothing of the server (only the contract, whose `RequestLimit` gives both the
    numbers); `tests/sdk/test_sdk_fake_rules.py` holds the two to the same answers."""
    max_tokens = sampling.max_tokens if sampling.HasField("max_tokens") else 1
    temperature = sampling.temperature if sampling.HasField("temperature") else 1.0
    top_p = sampling.top_p if sampling.HasField("top_p") else 1.0
    if max_tokens < 1:
        raise _refuse("sampling.max_tokens", f"must be positive; got {max_tokens}")
    if len(sampling.stop) > MAX_STOP:
        raise _refuse("sampling.stop", f"at most {MAX_STOP} stop strings; got {len(sampling.stop)}")
    for i, stop in enumerate(sampling.stop):
        if len(stop) > MAX_STOP_CHARS:
            raise _refuse(f"sampling.stop[{i}]", f"at most {MAX_STOP_CHARS} characters")
    for i, stop in enumerate(sampling.stop):
        if not stop:
            raise _refuse(f"sampling.stop[{i}]", "must not be empty")
    if not (math.isfinite(temperature) and temperature >= 0):
        raise _refuse("sampling.temperature", "must be a finite number >= 0")
    if not (math.isfinite(top_p) and 0 < top_p <= 1):
        raise _refuse("sampling.top_p", "must be in (0, 1]")
    if not 0 <= sampling.top_logprobs <= MAX_TOP_LOGPROBS:
        raise _refuse("sampling.top_logprobs", f"must be between 0 and {MAX_TOP_LOGPROBS}")
    for i, t in enumerate(sampling.stop_token_ids):
        if not 0 <= t < VOCAB:
            raise _refuse(f"sampling.stop_token_ids[{i}]",
                           f"{t} is outside the vocabulary [0, {VOCAB})")
    if top_p < 1 and temperature > 0:  # its models are trainable: `check_trained_sampling`
        raise _refuse("sampling.top_p", f"must be 1 for a trainable model; got {top_p}: a "
                      "nucleus's logprobs are not those of the full distribution, which "
                      "training recomputes")


def render(messages: Sequence[types_pb2.ChatMessage]) -> str:
    """The fake chat template."""
    parts = []
    for m in messages:
        calls = "".join(json.dumps([c.name, c.arguments_json]) for c in m.tool_calls)
        parts.append(f"<|{ROLE_NAMES[m.role]}|>{m.content}{calls}\n")
    return "".join(parts) + "<|assistant|>"


def prompt_of(request: epb.GenerateRequest) -> tuple[str, list[int]]:
    """The request's prompt as text and as token ids, checked."""
    kind = request.WhichOneof("input")
    if kind == "chat":
        if not request.chat.messages:
            raise _invalid("chat.messages", "must not be empty")
        for i, message in enumerate(request.chat.messages):
            if message.role not in ROLE_NAMES:
                raise _invalid(f"chat.messages[{i}].role", "must be set")
        prompt = render(request.chat.messages)
        return prompt, list(prompt.encode())
    if kind == "tokens":
        prompt_ids = list(request.tokens.token_ids)
        if not prompt_ids or max(prompt_ids) >= VOCAB:
            raise _invalid("tokens.token_ids", f"must be non-empty ids below {VOCAB}")
        return bytes(t for t in prompt_ids if t < EOS_TOKEN_ID).decode(errors="replace"), prompt_ids
    raise _invalid("input", "give chat messages or token ids")


def complete(request: epb.GenerateRequest, reply: Callable[[], str]) -> epb.GenerateResult:
    """The toy model: the reply (or a call of the first tool), cut by the sampling limits."""
    sampling, result = request.sampling, epb.GenerateResult()
    messages, tools = request.chat.messages, request.chat.tools
    if tools and (not messages or messages[-1].role != types_pb2.ROLE_TOOL):
        text = json.dumps({"name": tools[0].name, "arguments": {}})
        ids = [*text.encode(), EOS_TOKEN_ID]
        result.finish_reason = types_pb2.FINISH_REASON_TOOL_CALLS
        call_id = f"call_{uuid.uuid4().hex[:8]}"
        result.message.tool_calls.add(id=call_id, name=tools[0].name, arguments_json="{}")
    else:
        text = reply()
        ids = [*text.encode(), EOS_TOKEN_ID]
        result.finish_reason = types_pb2.FINISH_REASON_STOP
        if cuts := [(text.find(s), s) for s in sampling.stop if s and s in text]:
            at, stop = min(cuts)  # the stop string is generated but not returned
            text, ids = text[:at], list((text[:at] + stop).encode())
        for i, token in enumerate(ids):
            if token in sampling.stop_token_ids:
                text, ids = bytes(ids[:i]).decode(errors="replace"), ids[: i + 1]
                break
    if sampling.HasField("max_tokens") and len(ids) > sampling.max_tokens:
        ids = ids[: sampling.max_tokens]
        text = bytes(t for t in ids if t < EOS_TOKEN_ID).decode(errors="ignore")
        result.finish_reason = types_pb2.FINISH_REASON_LENGTH
        del result.message.tool_calls[:]
    result.text = text
    result.message.role = types_pb2.ROLE_ASSISTANT
    result.message.content = "" if result.message.tool_calls else text
    result.completion_ids[:] = ids
    result.logprobs[:] = [-0.05 - (token % 10) / 20 for token in ids]
    for token, logprob in zip(ids, result.logprobs) if sampling.top_logprobs else ():
        alternatives = result.top_logprobs.add()
        for rank in range(sampling.top_logprobs):
            alt = token if rank == 0 else (token + rank) % EOS_TOKEN_ID
            alternatives.entries.add(token_id=alt, logprob=logprob - rank)
    return result


def chunks(result: epb.GenerateResult) -> Iterator[epb.GenerateChunk]:
    """A result's tokens streamed one per chunk, with the text each completes."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    for token, logprob in zip(result.completion_ids, result.logprobs):
        text = decoder.decode(bytes([token])) if token < EOS_TOKEN_ID else ""
        yield epb.GenerateChunk(token_ids=[token], logprobs=[logprob], text=text)


def parent_of(calls: Sequence[epb.CallRecord], prompt_ids: list[int]) -> str:
    """The call whose prompt + completion this prompt extends the longest ("" for none)."""
    parent, longest = "", 0
    for call in calls:
        seen = [*call.prompt_ids, *call.completion_ids]
        if len(seen) > longest and prompt_ids[: len(seen)] == seen:
            parent, longest = call.call_id, len(seen)
    return parent
