"""ModelInfo tells a client the trainer's group_size, so an attached run can refuse to
play groups the server would cut differently."""

from __future__ import annotations

import swarmrl
from tests.server_fixtures import ServerFactory


async def test_list_models_reports_the_trainers_group_size(make_server: ServerFactory) -> None:
    trained = await make_server(train={"group_size": "3", "progress": "false",
                                       "checkpoint_on_stop": "false"})
    async with swarmrl.AsyncSwarmClient(trained.grpc_target) as client:
        (model,) = await client.list_models()
    assert (model.name, model.trainable, model.group_size) == ("tiny", True, 3)


async def test_a_model_not_trained_reports_group_size_zero(make_server: ServerFactory) -> None:
    served = await make_server()
    async with swarmrl.AsyncSwarmClient(served.grpc_target) as client:
        (model,) = await client.list_models()
    assert (model.trainable, model.group_size) == (False, 0)
