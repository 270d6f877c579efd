"""`/v1/models` response models."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "swarmrl"
    # -- swarmrl extensions --
    policy_version: int
    """Version of the weights serving new calls (grows as the model trains)."""
    max_model_len: int
    """Context length: prompt + completion tokens."""
    trainable: bool


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
