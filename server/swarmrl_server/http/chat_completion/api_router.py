"""`POST /v1/chat/completions`: a thin route over `OpenAIServingChat`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request

from swarmrl_server.http.chat_completion.protocol import ChatCompletionRequest
from swarmrl_server.http.chat_completion.serving import OpenAIServingChat
from swarmrl_server.http.protocol import ErrorResponse

router = APIRouter()
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 404, 409, 413, 429, 500)
}


def chat(request: Request) -> OpenAIServingChat:
    return request.app.state.openai_serving_chat  # type: ignore[no-any-return]


@router.post("/v1/chat/completions", responses=ERRORS)
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Any:
    return await chat(request).create(body, request)


def attach_router(app: FastAPI, prefix: str = "") -> None:
    app.include_router(router, prefix=prefix)
