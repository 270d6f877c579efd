"""LoRA on a real `vllm serve --enable-lora` (the session's, from .venv-vllm): two models
trained as adapters of one base by two trainers at once, served by ONE vLLM server.

After each trainer step the new adapter version is written to a new directory and loaded
at runtime under a new name; the served logprobs of that version equal the trainer's
recompute (fp32, <= 1e-4), every recorded call carries the version of the adapter that
produced it, the two models' policy versions move independently, and a sync moves the
adapter's bytes, not the model's. A call running when a new version loads finishes on
the version it started on (held at a known token while the version loads, so that it
surely runs then)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch

import swarmrl
from swarmrl_server.app import RunningServer
from swarmrl_server.config import ModelSpec
from swarmrl_server.engine.adapter import AdapterEngine
from swarmrl_server.engine.base import SamplingParams
from swarmrl_server.engine.vllm.engine import VLLMEngine
from swarmrl_server.security import IN_PROCESS
from tests.engine_fixtures import random_adapters
from tests.helpers import assert_eventually
from tests.server_fixtures import ServerFactory
from tests.serving_support import PROMPT, collect, recompute, run
from tests.vllm_support import hold_calls

pytestmark = pytest.mark.slow

TRAIN = {"lora_rank": "8", "lora_alpha": "16", "batch_rule": "groups", "group_size": "2",
         "batch_size": "1", "lr": "5e-2", "progress": "false", "checkpoint_every": "0",
         "checkpoint_on_stop": "false"}
HOLD_AT = 3
"""Tokens the long call streams before it is held (while the next adapter version loads)."""


@pytest.fixture
async def two_adapters(vllm_url: str, make_server: ServerFactory) -> RunningServer:
    models = tuple(ModelSpec(n, "tiny", engine="vllm", urls=(vllm_url,)) for n in "ab")
    return await make_server(models=models, train=TRAIN)


async def play(client: swarmrl.AsyncSwarmClient, group: str, models: list[str],
               seeds: tuple[int, ...] = (0, 1)) -> list[str]:
    """A group of episodes, each calling every model in `models` once; rewards differ."""
    ids = []
    for seed in seeds:
        async with client.episode(task_id="t", group_id=group, models=["a", "b"]) as ep:
            for m in models:
                await ep.generate_tokens(PROMPT, model=m, max_tokens=8, temperature=1.0,
                                         seed=seed)
            await ep.reward(float(seed % 2))
            ids.append(ep.id)
    return ids


def check(condition: bool) -> None:
    assert condition


async def test_two_adapters_on_one_vllm_server_train_at_once(two_adapters: RunningServer) -> None:
    swarm = two_adapters.swarm
    a, b = swarm.models["a"], swarm.models["b"]
    assert isinstance(a.engine, AdapterEngine) and isinstance(b.engine, AdapterEngine)
    base = a.engine.base
    assert b.engine.base is base and isinstance(base, VLLMEngine) and len(base.servers) == 1

    async with swarmrl.AsyncSwarmClient(two_adapters.grpc_target) as client:
        round1 = await play(client, "g1", ["a", "b"])  # both trainers step (at once)
        await assert_eventually(
            lambda: check(a.engine.policy_version == 1 == b.engine.policy_version), timeout=180)
        round2 = await play(client, "g2", ["a"], seeds=(2, 3))  # only a steps again
        await assert_eventually(lambda: check(a.engine.policy_version == 2), timeout=180)
        round3 = await play(client, "g3", ["a", "b"], seeds=(4,))
    assert (a.trainer.policy_version, b.trainer.policy_version) == (2, 1)

    # No token carries a wrong version: each call is stamped with its adapter's version.
    expected = [(round1, {"a": 0, "b": 0}), (round2, {"a": 1}), (round3, {"a": 2, "b": 1})]
    for ids, versions in expected:
        for episode_id in ids:
            record = await swarm.episodes.get(episode_id, with_calls=True, caller=IN_PROCESS)
            assert {c.model: c.policy_version for c in record.calls} == versions

    # The served logprobs of each adapter's latest version equal its trainer's recompute.
    sampling = SamplingParams(temperature=0.7, max_tokens=12, seed=11)
    for host, version in ((a, 2), (b, 1)):
        out = await run(host.engine, sampling)  # type: ignore[arg-type]
        assert out.policy_version == version
        model: Any = host.trainer.group.model
        model.eval()
        served = torch.tensor(out.logprobs)
        assert (served - recompute(model, out.completion_ids, 0.7)).abs().max() <= 1e-4
        with model.disable_adapter():
            assert (served - recompute(model, out.completion_ids, 0.7)).abs().max() > 1e-3

    # A sync moved the adapter alone, into a new directory, loaded under a new name; the
    # old version was unloaded once idle.
    full = sum(p.numel() * 4 for p in a.trainer.group.model.get_base_model().parameters())
    assert 0 < a.engine.last_sync_bytes < 0.05 * full
    served_names = {m["id"] for m in (await base.servers[0]._call("GET", "/v1/models"))["data"]}
    assert {"a-v2", "b-v1"} <= served_names and "a-v1" not in served_names
    adapter_dirs = sorted(p.name for p in (base.weights_dir / "a").iterdir())
    assert adapter_dirs == ["v2"]


async def test_a_call_finishes_on_the_adapter_version_it_started_on(
    vllm_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Loading version 2 does not wait for calls on version 1: they finish on it (stamped
    1, with version 1's logprobs) while new calls start on version 2; version 1 is then
    unloaded. The long call is held after HOLD_AT tokens (tests/vllm_support.py) until
    version 2 has loaded and served a call, so it surely runs across the load."""
    from swarmrl_server.engine.adapter import LoraSpec
    from swarmrl_server.engine.base import GenerationOutput
    from swarmrl_server.trainer import lora

    model, versions = random_adapters(tiny_model_dir, (1, 2))
    spec = LoraSpec(rank=8, alpha=16)
    base = VLLMEngine("m", tiny_model_dir, urls=[vllm_url], trainable=True,
                      weights_dir=tmp_path / "w")
    view = AdapterEngine("m", base, spec, shared=[])
    await view.start()
    try:
        await view.update_weights(versions[0], 1)
        hold = await hold_calls(base.servers[0], tokens=HOLD_AT)
        long = asyncio.create_task(collect(view.generate(
            PROMPT, SamplingParams(temperature=1.0, max_tokens=100, seed=1))))
        await hold.wait_held()
        # Returns with the long call running (held); a load that waited for it would not.
        await asyncio.wait_for(view.update_weights(versions[1], 2), timeout=60)
        hold.log("loaded")
        assert not long.done()
        new = await run(view, SamplingParams(temperature=0.7, max_tokens=8, seed=2))  # type: ignore[arg-type]
        assert new.policy_version == 2 == view.policy_version
        hold.release()
        old = (await long)[-1]
        assert isinstance(old, GenerationOutput) and old.policy_version == 1
        assert old.spans() == [(1, 0, len(old.completion_ids))]
        assert len(old.completion_ids) > hold.passed  # it streamed on after the load
        # The long call was in flight on version 1 when version 2 loaded; version 1 was
        # unloaded only once the call had ended.
        hold.assert_order("held", "POST /v1/load_lora_adapter", "loaded", "released", "ended")
        await assert_eventually(
            lambda: check("POST /v1/unload_lora_adapter" in hold.names()), timeout=30)
        hold.assert_order("ended", "POST /v1/unload_lora_adapter")
        from peft import set_peft_model_state_dict

        for tensors, out, temperature in ((versions[0], old, 1.0), (versions[1], new, 0.7)):
            set_peft_model_state_dict(model, tensors, adapter_name=lora.ADAPTER_NAME)
            want = recompute(model, out.completion_ids, temperature)[:len(out.logprobs)]
            got = torch.tensor(out.logprobs)
            assert (got - want[:len(got)]).abs().max() <= 1e-4
        await assert_eventually(lambda: check(not (tmp_path / "w" / "m" / "m" / "v1").exists()),
                                timeout=30)
    finally:
        await view.stop()
