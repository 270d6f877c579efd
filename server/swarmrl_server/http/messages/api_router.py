"""`POST /v1/messages` and `/v1/messages/count_tokens` (Anthropic Messages API)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request

from swarmrl_server.http.messages.protocol import CountTokensRequest, MessagesRequest
from swarmrl_server.http.messages.serving import AnthropicServingMessages
from swarmrl_server.http.protocol import AnthropicErrorResponse

router = APIRouter()
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": AnthropicErrorResponse} for status in (400, 401, 404, 409, 413, 429, 500)
}
PATHS = ("/v1/messages",)
"""Routes whose errors take Anthropic's shape (matched by path suffix / prefix)."""


def messages(request: Request) -> AnthropicServingMessages:
    return request.app.state.anthropic_serving_messages  # type: ignore[no-any-return]


@router.post("/v1/messages", responses=ERRORS)
async def create_message(body: MessagesRequest, request: Request) -> Any:
    return await messages(request).create(body, request)


@router.post("/v1/messages/count_tokens", responses=ERRORS)
async def count_tokens(body: CountTokensRequest, request: Request) -> Any:
    return await messages(request).count_tokens(body, request)


def attach_router(app: FastAPI, prefix: str = "") -> None:
    app.include_router(router, prefix=prefix)
