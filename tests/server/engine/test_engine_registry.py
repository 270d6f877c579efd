"""The engine registry, the one host loader, and the request-resolution step, in process."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from swarmrl_server.config import ModelSpec, ServerConfig, with_engines
from swarmrl_server.engine.base import Engine
from swarmrl_server.engine.echo import EchoEngine
from swarmrl_server.engine.registry import (
    EngineKind,
    EngineOptions,
    Resources,
    build_engine,
    engine_kind,
    engine_names,
    register,
)
from swarmrl_server.episodes.resolve import GenerationPolicy, SamplingRequest, resolve
from swarmrl_server.errors import SwarmError
from swarmrl_server.hosting import ModelHost, build_local, load_hosts


def test_kinds_are_registered_once_with_their_resources() -> None:
    assert engine_names() == ("hf", "vllm", "echo")
    assert engine_kind("vllm").resources == Resources(cpus=1.0, gpus=1.0)
    assert engine_kind("hf").resources == Resources() and not engine_kind("hf").attaches
    with pytest.raises(ValueError, match="expected one of hf, vllm, echo"):
        engine_kind("tgi")
    with pytest.raises(ValueError, match="already registered"):
        register(EngineKind("echo", engine_kind("echo").build))
    # --engine-url goes to a kind that attaches, and only there.
    specs = with_engines((ModelSpec.parse("a=tiny@echo"), ModelSpec.parse("b=tiny@vllm")),
                         "hf", ["http://10.0.0.5:8100"])
    assert [s.urls for s in specs] == [(), ("http://10.0.0.5:8100",)]
    with pytest.raises(ValueError, match="does not attach"):
        with_engines((ModelSpec.parse("a=tiny@echo"),), "hf", ["a=http://10.0.0.5:8100"])


def test_the_vllm_builder_attaches_and_writes_under_the_work_dir(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from swarmrl_server.engine.vllm.engine import VLLMEngine

    options = EngineOptions(name="m", path=tiny_model_dir, urls=("http://127.0.0.1:9",),
                            work_dir=tmp_path, trainable=True)
    engine = build_engine("vllm", options)  # attached: nothing is launched or contacted
    assert isinstance(engine, VLLMEngine) and engine.trainable
    assert [s.url for s in engine.servers] == ["http://127.0.0.1:9"]
    assert engine.weights_dir == tmp_path / "vllm" / "vllm-weights" / "m"


def test_one_loader_places_every_model(model_cache: Path, tiny_model_dir: Path) -> None:
    config = ServerConfig(models=(ModelSpec("a", "tiny", "echo"), ModelSpec("b", "tiny", "echo")),
                          cache_dir=model_cache, max_batch_size=7)
    placed: list[tuple[str, EngineOptions]] = []

    def place(spec: ModelSpec, options: EngineOptions) -> Engine:
        placed.append((spec.engine or "", options))
        return build_local(spec, options)

    hosts = load_hosts(config, place)
    assert list(hosts) == ["a", "b"] and all(isinstance(h.engine, EchoEngine) for h in hosts.values())
    assert [(kind, o.name, o.path, o.max_batch_size) for kind, o in placed] == [
        ("echo", "a", tiny_model_dir, 7), ("echo", "b", tiny_model_dir, 7)]
    with pytest.raises(ValueError, match="two models are named 'a'"):
        load_hosts(dataclasses.replace(config, models=(ModelSpec("a", "tiny", "echo"),) * 2))


def test_resolution_applies_defaults_forced_values_and_the_context(tiny_model_dir: Path) -> None:
    engine = build_engine("echo", EngineOptions(name="tiny", path=tiny_model_dir))
    host = ModelHost("tiny", engine, "tiny")
    policy = GenerationPolicy(default_max_tokens=10**6, force_temperature=0.5)
    prompt = [1, 2, 3]
    r = resolve(host, policy, SamplingRequest(temperature=1.0), token_ids=prompt,
                affinity_key="ep-1")
    assert r.prompt_ids == prompt and r.chat is None
    assert r.overridden == {"temperature": 0.5} and r.params.temperature == 0.5
    assert r.params.max_tokens == engine.max_model_len - 3  # the default shrinks to fit
    assert r.params.affinity_key == "ep-1"
    quiet = resolve(host, policy, SamplingRequest(), token_ids=prompt)
    assert quiet.overridden == {} and quiet.params.temperature == 0.5  # not asked: not reported
    for sampling, tokens, field in [
        (SamplingRequest(max_tokens=0), prompt, "sampling.max_tokens"),
        (SamplingRequest(max_tokens=engine.max_model_len), prompt, "sampling.max_tokens"),
        (SamplingRequest(top_logprobs=21), prompt, "sampling.top_logprobs"),
        (SamplingRequest(stop=("x",) * 17), prompt, "sampling.stop"),
        (SamplingRequest(stop=("",)), prompt, "sampling.stop[0]"),
        (SamplingRequest(), [], "input.token_ids"),
        (SamplingRequest(), [1, engine.vocab_size], "input.token_ids[1]"),
        (SamplingRequest(), [1] * engine.max_model_len, "input"),
    ]:
        with pytest.raises(SwarmError) as err:
            resolve(host, policy, sampling, token_ids=tokens)
        assert err.value.field == field, (sampling, err.value)
