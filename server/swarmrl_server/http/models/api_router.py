"""`GET /v1/models` and `GET /v1/models/{model}`."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request

from swarmrl_server.http.models.protocol import ModelCard, ModelList
from swarmrl_server.http.models.serving import OpenAIServingModels

router = APIRouter()


def models(request: Request) -> OpenAIServingModels:
    return request.app.state.openai_serving_models  # type: ignore[no-any-return]


@router.get("/v1/models")
async def list_models(request: Request) -> ModelList:
    return await models(request).list(request)


@router.get("/v1/models/{model:path}")
async def retrieve_model(model: str, request: Request) -> ModelCard:
    return await models(request).get(model, request)


def attach_router(app: FastAPI, prefix: str = "") -> None:
    app.include_router(router, prefix=prefix)
