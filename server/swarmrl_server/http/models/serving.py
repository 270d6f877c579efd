"""`OpenAIServingModels`: the models this server hosts."""

from __future__ import annotations

import time

from fastapi import Request

from swarmrl_server.errors import Reason, not_found
from swarmrl_server.http.auth import EpisodeAuth
from swarmrl_server.http.errors import from_swarm_error
from swarmrl_server.http.models.protocol import ModelCard, ModelList
from swarmrl_server.swarm import Swarm


class OpenAIServingModels:
    def __init__(self, swarm: Swarm, auth: EpisodeAuth) -> None:
        self.swarm = swarm
        self.auth = auth
        self.created = int(time.time())

    def _card(self, name: str) -> ModelCard:
        host = self.swarm.models[name]
        return ModelCard(
            id=name, created=self.created, policy_version=host.engine.policy_version,
            max_model_len=host.engine.max_model_len, trainable=host.trainable,
        )

    async def list(self, raw: Request) -> ModelList:
        await self.auth.check_listing(raw)
        return ModelList(data=[self._card(name) for name in self.swarm.models])

    async def get(self, model: str, raw: Request) -> ModelCard:
        await self.auth.check_listing(raw)
        if model not in self.swarm.models:
            raise from_swarm_error(not_found(Reason.MODEL_NOT_FOUND, "model", model))
        return self._card(model)
