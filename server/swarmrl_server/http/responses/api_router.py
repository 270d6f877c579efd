"""`POST /v1/responses` and `GET /v1/responses/{id}`: thin routes over `OpenAIServingResponses`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI, Request

from swarmrl_server.http.protocol import ErrorResponse
from swarmrl_server.http.responses.protocol import ResponsesRequest
from swarmrl_server.http.responses.serving import OpenAIServingResponses

router = APIRouter()
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse} for status in (400, 401, 404, 409, 413, 429, 500)
}


def responses(request: Request) -> OpenAIServingResponses:
    return request.app.state.openai_serving_responses  # type: ignore[no-any-return]


@router.post("/v1/responses", responses=ERRORS)
async def create_response(body: ResponsesRequest, request: Request) -> Any:
    return await responses(request).create(body, request)


@router.get("/v1/responses/{response_id}", responses=ERRORS)
async def retrieve_response(response_id: str, request: Request) -> Any:
    return await responses(request).retrieve(response_id, request)


def attach_router(app: FastAPI, prefix: str = "") -> None:
    app.include_router(router, prefix=prefix)
