"""Models shared by every endpoint: the lenient request base, response base, error bodies.

Requests accept fields we do not know (clients add new OpenAI fields faster than
anyone can follow) and log their names, as vLLM's `OpenAIBaseModel` does; fields we
know but cannot honour are rejected by the serving code, never silently dropped.
"""

from __future__ import annotations

from typing import Any, ClassVar

import structlog
from pydantic import BaseModel, ConfigDict, model_serializer, model_validator

log = structlog.get_logger("swarmrl.http")


class OpenAIBaseModel(BaseModel):
    """A request model: unknown fields are kept (and logged), not an error."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="wrap")
    @classmethod
    def _log_ignored_fields(cls, data: Any, handler: Any) -> Any:
        result = handler(data)
        extra = result.model_extra or {}
        # A null field asks for nothing; clients echo e.g. `"refusal": null` back on
        # assistant messages, which is not worth a warning on every turn.
        ignored = sorted(k for k, v in extra.items() if v is not None)
        if ignored:
            log.warning("ignored_fields", model=cls.__name__, fields=ignored)
        return result


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
