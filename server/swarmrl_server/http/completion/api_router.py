"""`POST /v1/completions`: a thin route over `OpenAIServingCompletion`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request

from swarmrl_server.http.chat_completion.api_router import ERRORS
from swarmrl_server.http.completion.protocol import CompletionRequest
from swarmrl_server.http.completion.serving import OpenAIServingCompletion

router = APIRouter()


def completion(request: Request) -> OpenAIServingCompletion:
    return request.app.state.openai_serving_completion  # type: ignore[no-any-return]


@router.post("/v1/completions", responses=ERRORS)
async def create_completion(body: CompletionRequest, request: Request) -> Any:
    return await completion(request).create(body, request)


def attach_router(app: FastAPI, prefix: str = "") -> None:
    app.include_router(router, prefix=prefix)
