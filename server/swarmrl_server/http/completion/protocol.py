"""`/v1/completions` request and response models (OpenAI's legacy completions API)."""

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
from swarmrl_server.limits import MAX_LEGACY_LOGPROBS


class StreamOptions(OpenAIBaseModel):
    include_usage: bool = False


class CompletionRequest(GenerationRequest):
    """A raw-prompt completion. The prompt is text (tokenized with the model's tokenizer)
    or token ids (used as they are: the token-in path for agents that render their own
    prompts); a list of prompts runs each of them `n` times."""

    model: str
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int | None = Field(16, ge=1)
    """OpenAI's default for this endpoint is 16."""
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int = Field(1, ge=1, le=16)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: int | None = Field(None, ge=0, le=MAX_LEGACY_LOGPROBS)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    # -- swarmrl extensions --
    return_token_ids: bool = False
    """Return `prompt_token_ids` and `token_ids` on each choice (and chunk)."""
    request_id: str | None = Field(None, max_length=200)
    """Idempotency: choice i of prompt p is recorded under "<request_id>/<p>/<i>"."""


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(ResponseModel):
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"prompt_token_ids", "token_ids"})

    index: int
    text: str
    finish_reason: Literal["stop", "length"] | None
    logprobs: CompletionLogprobs | None = None
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None


class CompletionResponse(ResponseModel):
    omit_if_none: ClassVar[frozenset[str]] = frozenset({"usage", "swarmrl"})

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    swarmrl: SwarmrlInfo | None = None
    """On the unary response, and on the stream's last chunk."""

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json")
