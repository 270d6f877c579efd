"""`/v1/responses` request and response models (OpenAI's Responses API, plus extensions).

Input items are one flat model (a message, `function_call`, `function_call_output` or
`reasoning` item, told apart by `type`), so that what the serving code refuses is named
by its position (`input[3].type`) rather than by a pydantic union's member tags.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from swarmrl_server.http.protocol import (
    GenerationRequest,
    OpenAIBaseModel,
    ResponseModel,
    SwarmrlInfo,
)

# -- request -------------------------------------------------------------------------


LOGPROBS = "message.output_text.logprobs"
KNOWN_INCLUDES = frozenset({
    LOGPROBS,
    # Nothing to include here (no reasoning is produced, no built-in tool runs), so these
    # are honoured vacuously: harnesses that always ask for them (e.g. stateless clients
    # asking for encrypted reasoning) work unchanged.
    "reasoning.encrypted_content", "file_search_call.results", "web_search_call.results",
    "web_search_call.action.sources", "code_interpreter_call.outputs",
    "computer_call_output.output.image_url", "message.input_image.image_url",
})
MAX_METADATA = (16, 64, 512)
"""OpenAI's metadata limits: pairs, key length, value length."""


def metadata_fits(meta: dict[str, str] | None) -> bool:
    pairs, key_len, value_len = MAX_METADATA
    return len(meta or {}) <= pairs and all(
        len(k) <= key_len and len(v) <= value_len for k, v in (meta or {}).items())


class ContentPart(OpenAIBaseModel):
    """A part of a message's content or of a function call's output; only text parts
    (`input_text`, `output_text`) can be served (checked in serving)."""

    type: str
    text: str | None = None
    annotations: list[Any] | None = None
    logprobs: list[Any] | None = None


class InputItem(OpenAIBaseModel):
    """One item of `input`. `type` is "message" when absent (OpenAI's EasyInputMessage)."""

    type: str = "message"
    id: str | None = None
    status: str | None = None
    # message
    role: Literal["user", "system", "developer", "assistant"] | None = None
    content: str | list[ContentPart] | None = None
    phase: str | None = None
    # function_call / function_call_output
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | list[ContentPart] | None = None
    # reasoning (passed back by clients; this server never produces one)
    summary: list[Any] | None = None
    encrypted_content: str | None = None


class FunctionTool(OpenAIBaseModel):
    """A tool; only `type: "function"` can be served (built-in tools are refused)."""

    type: str
    name: str | None = None
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class TextFormat(OpenAIBaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class TextConfig(OpenAIBaseModel):
    format: TextFormat | None = None
    verbosity: str | None = None


class ResponsesRequest(GenerationRequest):
    """OpenAI's `POST /v1/responses` body. Fields the API defines that this server cannot
    honour (built-in tools, background mode, server-side conversations, truncation,
    reasoning settings) are accepted only at their neutral values; anything else is a
    400 naming the field. Identifiers that do not change what is generated (`user`,
    `safety_identifier`, `prompt_cache_key`, `service_tier`) are accepted."""

    model: str
    input: str | list[InputItem] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    text: TextConfig | None = None
    include: list[str] | None = None
    metadata: dict[str, str] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    # refused unless neutral
    background: bool | None = None
    conversation: Any = None
    prompt: Any = None
    reasoning: dict[str, Any] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    context_management: Any = None
    # accepted hints
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    service_tier: str | None = None
    max_tool_calls: int | None = None
    # -- swarmrl extensions --
    seed: int | None = None
    """Sampling seed (the Responses API has none; chat completions' `seed`)."""
    return_token_ids: bool = False
    """Return `prompt_token_ids` and `token_ids` on the response: the exact ids the engine
    saw and generated."""
    request_id: str | None = Field(None, max_length=200)
    """Idempotency: a retry with the same id returns the recorded call (and response id)
    instead of generating again."""


# -- response ------------------------------------------------------------------------


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = 0


class ResponsesUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens"]


class ResponseSettings(BaseModel):
    """What a response echoes of its request. Stored with the call (see `store.py`), so
    `GET /v1/responses/{id}` and `previous_response_id` see the same values later."""

    id: str
    model: str
    store: bool
    created_at: float = Field(default_factory=lambda: float(int(time.time())))
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] = "auto"
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_logprobs: int | None = None
    text: dict[str, Any] = Field(default_factory=lambda: {"format": {"type": "text"}})
    metadata: dict[str, str] = Field(default_factory=dict)
    truncation: Literal["disabled"] = "disabled"

    @property
    def parse_tools(self) -> bool:
        """False for tool_choice "none": the tools are hidden from the model and the reply
        is the raw completion text."""
        return self.tool_choice != "none"

    @property
    def forced_tool(self) -> bool:
        """A tool call is forced ("required" or a named function): decoded under a grammar,
        and reported as an incomplete call when `max_output_tokens` cuts it."""
        return self.tool_choice == "required" or isinstance(self.tool_choice, dict)

    @property
    def forced_name(self) -> str:
        """The function a named forced choice calls ("" otherwise)."""
        return str(self.tool_choice.get("name") or "") if isinstance(self.tool_choice, dict) \
            else ""


class ResponseObject(ResponseSettings, ResponseModel):
    """The `response` object (OpenAI's shape, plus the swarmrl extension fields)."""

    omit_if_none: ClassVar[frozenset[str]] = frozenset(
        {"prompt_token_ids", "token_ids", "swarmrl"})

    object: Literal["response"] = "response"
    completed_at: float | None = None
    status: Literal["in_progress", "completed", "incomplete"] = "in_progress"
    incomplete_details: IncompleteDetails | None = None
    error: dict[str, Any] | None = None
    output: list[dict[str, Any]] = Field(default_factory=list)
    usage: ResponsesUsage | None = None
    background: bool = False
    service_tier: str = "default"
    reasoning: dict[str, Any] = Field(default_factory=lambda: {"effort": None, "summary": None})
    prompt_token_ids: list[int] | None = None
    """Extension (return_token_ids): the exact prompt ids the engine saw."""
    token_ids: list[int] | None = None
    """Extension (return_token_ids): the generated ids, the stop token included."""
    swarmrl: SwarmrlInfo | None = None
    """Extension: episode, call id, policy version, overrides, fork reason (on a finished
    response)."""
