"""`/v1/messages` (Anthropic Messages API) request and response models."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from swarmrl_server.http.protocol import (
    GenerationRequest,
    OpenAIBaseModel,
    ResponseModel,
    SwarmrlInfo,
)


class ContentBlock(OpenAIBaseModel):
    """Any content block; which types can be served is checked in serving, so the 400
    names the block (`messages[2].content[0].type`) instead of a pydantic union path."""

    type: str
    text: str | None = None
    # tool_use
    id: str | None = None
    name: str | None = None
    input: Any = None
    # tool_result
    tool_use_id: str | None = None
    content: str | list[ContentBlock] | None = None
    is_error: bool | None = None


class MessageParam(OpenAIBaseModel):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class ToolParam(OpenAIBaseModel):
    name: str = Field(min_length=1)
    description: str | None = None
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    type: str | None = None
    """None or "custom"; Anthropic's server tools (bash, web search, ...) are not served."""


class ToolChoice(OpenAIBaseModel):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None


class ThinkingConfig(OpenAIBaseModel):
    type: str
    budget_tokens: int | None = None


class MessagesRequest(GenerationRequest):
    model: str
    max_tokens: int = Field(ge=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[ContentBlock] | None = None
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(None, ge=0, le=1)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: int | None = None
    stream: bool = False
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None
    metadata: dict[str, Any] | None = None
    thinking: ThinkingConfig | None = None
    service_tier: str | None = None
    # -- swarmrl extensions (as on /v1/chat/completions) --
    return_token_ids: bool = False
    request_id: str | None = Field(None, max_length=200)


class CountTokensRequest(OpenAIBaseModel):
    model: str
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[ContentBlock] | None = None
    tools: list[ToolParam] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None


class MessagesUsage(BaseModel):
    input_tokens: int
    output_tokens: int


class MessagesResponse(ResponseModel):
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"prompt_token_ids", "token_ids"})

    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[dict[str, Any]]
    stop_reason: Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]
    stop_sequence: str | None = None
    usage: MessagesUsage
    prompt_token_ids: list[int] | None = None
    """Extension (return_token_ids)."""
    token_ids: list[int] | None = None
    """Extension (return_token_ids): generated ids, the stop token included."""
    swarmrl: SwarmrlInfo
