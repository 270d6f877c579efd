"""`/v1/chat/completions` request and response models (OpenAI's shapes, plus extensions)."""

from __future__ import annotations

import time
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from swarmrl_server.http.protocol import (
    GenerationRequest,
    OpenAIBaseModel,
    ResponseModel,
    SwarmrlInfo,
    Usage,
)
from swarmrl_server.limits import MAX_TOP_LOGPROBS

# -- request -------------------------------------------------------------------------


class ContentPart(OpenAIBaseModel):
    """A part of a message's content; only text parts can be served (checked in serving)."""

    type: str
    text: str | None = None


class FunctionCallIn(OpenAIBaseModel):
    name: str
    arguments: str = "{}"


class ToolCallIn(OpenAIBaseModel):
    id: str = ""
    type: Literal["function"] = "function"
    function: FunctionCallIn


class ChatMessageIn(OpenAIBaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None


class FunctionDefinition(OpenAIBaseModel):
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(OpenAIBaseModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedToolChoice(OpenAIBaseModel):
    type: Literal["function"]
    function: dict[str, Any]


class StreamOptions(OpenAIBaseModel):
    include_usage: bool = False


class ChatCompletionRequest(GenerationRequest):
    """OpenAI's chat completion request. Fields OpenAI defines that this server cannot
    honour (penalties, logit_bias, constrained formats, forced tool calls) are accepted
    only at their neutral values; anything else is a 400 naming the field."""

    model: str
    messages: list[ChatMessageIn] = Field(min_length=1)
    tools: list[ChatTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(1, ge=1, le=16)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    response_format: dict[str, Any] | None = None
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    # -- swarmrl extensions --
    return_token_ids: bool = False
    """Return `prompt_token_ids` on the response and `token_ids` on each choice/chunk:
    the exact ids the engine saw and generated."""
    request_id: str | None = Field(None, max_length=200)
    """Idempotency: a retry with the same id returns the recorded call instead of
    generating again (with n > 1, choice i uses "<request_id>/<i>")."""


# -- response ------------------------------------------------------------------------


class FunctionCallOut(BaseModel):
    name: str
    arguments: str


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCallOut


class ChatMessageOut(ResponseModel):
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"tool_calls"})

    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None
    tool_calls: list[ToolCallOut] | None = None


class ChatChoice(ResponseModel):
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"token_ids"})

    index: int
    message: ChatMessageOut
    finish_reason: str
    logprobs: dict[str, Any] | None = None
    token_ids: list[int] | None = None
    """Extension (return_token_ids): the generated ids, the stop token included."""


class ChatCompletionResponse(ResponseModel):
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"prompt_token_ids"})

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str | None = None
    prompt_token_ids: list[int] | None = None
    """Extension (return_token_ids): the exact prompt ids the engine saw."""
    swarmrl: SwarmrlInfo


class FunctionCallDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(BaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta


class ChatDelta(ResponseModel):
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"role", "content", "tool_calls"})

    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class ChatChunkChoice(ResponseModel):
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"token_ids"})

    index: int
    delta: ChatDelta
    finish_reason: str | None = None
    logprobs: dict[str, Any] | None = None
    token_ids: list[int] | None = None


class ChatCompletionChunk(ResponseModel):
    omit_if_none: ClassVar[frozenset[str]] = frozenset(
        {"usage", "prompt_token_ids", "swarmrl"}
    )

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None
    prompt_token_ids: list[int] | None = None
    """Extension (return_token_ids): on the chunk that finishes the first choice (the
    prompt is rendered by the registry, so its ids are known with the first result)."""
    swarmrl: SwarmrlInfo | None = None
    """Extension: on the chunk that finishes the last choice."""
