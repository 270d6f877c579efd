"""Models shared by every endpoint: the lenient request base, response base, error bodies.

Requests accept fields we do not know (clients add new OpenAI fields faster than
anyone can follow) and log their names, as vLLM's `OpenAIBaseModel` does; fields we
know but cannot honour are rejected, never silently dropped. Sampling settings follow
one rule, for every door (`GenerationRequest`): honoured exactly and recorded
(temperature, top_p, max_tokens, stop, seed), or refused with a 400 naming the field
unless at their neutral value (`REFUSED_UNLESS_NEUTRAL`, and vLLM's own extras in
`VLLM_EXTRAS_REFUSED`). What a trainable model may sample is one rule for every door and
engine, applied once the request is resolved (`episodes.resolve.check_trained_sampling`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import structlog
from pydantic import BaseModel, ConfigDict, model_serializer, model_validator
from pydantic_core import PydanticCustomError

log = structlog.get_logger("swarmrl.http")

REFUSED_UNLESS_NEUTRAL: dict[str, tuple[object, ...]] = {
    "top_k": (None, 0, -1),
    "min_p": (None, 0),
    "typical_p": (None, 1),
    "top_a": (None, 0),
    "repetition_penalty": (None, 1),
    "presence_penalty": (None, 0),
    "frequency_penalty": (None, 0),
    "length_penalty": (None, 1),
    "logit_bias": (None, {}),
    "min_tokens": (None, 0),
}
"""Sampling settings this server does not honour, each with the values that ask for
nothing (accepted); any other value is refused with a 400 naming the field, on every
door, declared field or extra alike.

Why refused rather than honoured: the trainer recomputes every recorded token's logprob
from the model's full softmax. Truncating the distribution (top_k, min_p, typical_p,
top_a), reweighting it (penalties, logit_bias) or masking the end of text (min_tokens)
would make the logprobs recorded at generation differ from that recompute, so the
importance ratio would train on a distribution that never produced the tokens.
Honouring one needs the trainer to replay the same processing, which it does not; and
dropping one silently would sample from a distribution the client did not ask for."""

_GUIDED = ("vLLM's guided decoding is not applied here; the constraints this server "
           "decodes, records and the trainer replays are forced tool calls and "
           "response_format json_object / json_schema")

VLLM_EXTRAS_REFUSED: dict[str, tuple[tuple[object, ...], str]] = {
    "guided_json": ((None,), "vLLM's guided decoding is not applied here; use "
                    "response_format {\"type\": \"json_schema\"}, a grammar this server "
                    "decodes, records and the trainer replays"),
    "guided_regex": ((None,), _GUIDED),
    "guided_choice": ((None,), _GUIDED),
    "guided_grammar": ((None,), _GUIDED),
    "structured_outputs": ((None,), _GUIDED),
    "allowed_token_ids": ((None,), "a vocabulary mask changes the distribution, and the "
                          "trainer's recompute would not apply it"),
    "bad_words": ((None, []), "a vocabulary mask changes the distribution, and the "
                  "trainer's recompute would not apply it"),
    "ignore_eos": ((None, False), "a turn ends at the end-of-turn token (the recorded "
                   "turn ends there, and the chat's next turn extends it)"),
    "use_beam_search": ((None, False), "beam search does not sample: its tokens' logprobs "
                        "are not those of what drew them"),
    "truncate_prompt_tokens": ((None,), "the prompt is recorded exactly as sent; a prompt "
                               "too long for the context is refused instead"),
}
"""vLLM's own request extras (its `SamplingParams` as body fields), which clients written
for vLLM send: {field: (values that ask for nothing, why it is refused)}. Logged and
dropped, each would serve something other than what the client asked for, so any other
value is a 400 naming the field, on every door, like `REFUSED_UNLESS_NEUTRAL`."""

SAMPLING_REFUSED = "sampling_not_honoured"
"""The pydantic error type of a refused sampling setting; its `ctx["param"]` names the
field (the error has no location of its own: extras are not fields)."""


class OpenAIBaseModel(BaseModel):
    """A request model: unknown fields are kept (and logged), not an error."""

    model_config = ConfigDict(extra="allow")

    # An "after" validator, not a "wrap" one: it runs once the model is built (for each
    # message of a chat, too), and a wrap validator costs a call through Python around
    # every model's own validation (~3 % of a shim call's server time).
    @model_validator(mode="after")
    def _log_ignored_fields(self) -> Any:
        extra = self.__pydantic_extra__
        if not extra:
            return self
        # A null field asks for nothing; clients echo e.g. `"refusal": null` back on
        # assistant messages, which is not worth a warning on every turn. A sampling
        # setting that got here is at its neutral value: honoured, not ignored.
        ignored = sorted(k for k, v in extra.items() if v is not None
                         and k not in REFUSED_UNLESS_NEUTRAL and k not in VLLM_EXTRAS_REFUSED)
        if ignored:
            log.warning("ignored_fields", model=type(self).__name__, fields=ignored)
        return self


class GenerationRequest(OpenAIBaseModel):
    """The body of a generating endpoint (chat completions, completions, responses,
    messages): `REFUSED_UNLESS_NEUTRAL` and `VLLM_EXTRAS_REFUSED` are applied here, once,
    while the body is parsed, so a refused request never reaches an episode or an engine."""

    @model_validator(mode="after")
    def _refuse_unhonoured_sampling(self) -> GenerationRequest:
        extra = self.model_extra or {}
        refused = {**{name: (neutral, "recorded logprobs must match the trainer's recompute "
                             "from the full distribution")
                      for name, neutral in REFUSED_UNLESS_NEUTRAL.items()},
                   **VLLM_EXTRAS_REFUSED}
        for name, (neutral, why) in refused.items():
            value = getattr(self, name) if name in type(self).model_fields else extra.get(name)
            if value not in neutral:
                shown = " or ".join(repr(v) for v in neutral if v is not None)
                raise PydanticCustomError(
                    SAMPLING_REFUSED,
                    "not supported by this server: {why} ({instead}leave it out)",
                    {"param": name, "why": why, "instead": f"use {shown} or " if shown else ""},
                )
        return self


class ResponseModel(BaseModel):
    """A response model; fields named in `omit_if_none` (our extensions) are left out
    of the JSON unless set, so plain OpenAI clients see plain OpenAI bodies."""

    omit_if_none: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_unset_extensions(self, handler: Any) -> Any:
        data = handler(self)
        for name in self.omit_if_none:
            if data.get(name) is None:
                data.pop(name, None)
        return data


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error body: {"error": {"message", "type", "param", "code"}}."""

    error: ErrorInfo


class AnthropicErrorInfo(BaseModel):
    type: str
    message: str


class AnthropicErrorResponse(BaseModel):
    """Anthropic's error body: {"type": "error", "error": {"type", "message"}}."""

    type: str = "error"
    error: AnthropicErrorInfo


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class SwarmrlInfo(BaseModel):
    """The `swarmrl` extension object on every generation response (see http/__init__)."""

    episode_id: str
    call_ids: list[str]
    """One recorded call per choice, in choice order."""
    policy_version: int
    """The version that generated the first choice's last token."""
    version_spans: list[list[tuple[int, int, int]]] = []
    """Per choice, in choice order: (policy version, start, end) over its completion
    tokens, which version generated tokens [start, end)."""
    overridden: dict[str, Any]
    """Sampling fields the server's policy replaced: {field: value used}."""
    fork_reason: str = ""
    """Why the prompt could not extend an earlier call's exact tokens ("" when it did,
    or on an episode's first call)."""
