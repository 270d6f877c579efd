"""Engines of every kind on the tiny model, and one real `vllm serve` per test session.

vLLM takes about a minute to start on CPU, so one launched server (from .venv-vllm,
started exactly as `LaunchedServer` starts it) serves every vLLM test; the engines attach
to it with `urls=`. Tests that change its weights put the original ones back.
(Loaded as a pytest plugin by conftest.py.)
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from swarmrl_server.engine.base import Engine

if TYPE_CHECKING:
    import torch

MAX_LEN = 128
"""Context length of the test engines (short: the limit is cheap to reach)."""
LONG_CONTEXT = 1024
"""Context length of the session's vLLM server and of those whose tests time a kill against
a call in flight (tests/server/engine/test_vllm_crash.py): a call of ~1,000 tokens still
runs seconds after it started, even when the test reads its stream well behind the server
(a loaded machine). Weight syncs are timed by holding the call instead
(tests/vllm_support.py)."""

REPO = Path(__file__).resolve().parent.parent
VLLM_PYTHON = Path(os.environ.get("SWARMRL_VLLM_PYTHON") or REPO / ".venv-vllm" / "bin" / "python")


@pytest.fixture(scope="session")
def vllm_url(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of the session's real `vllm serve --enable-lora` of the tiny model (fp32,
    context `LONG_CONTEXT`, 2 adapters of rank <= 8 loaded at runtime), launched as
    `VLLMEngine` launches one for LoRA models. One server for every vLLM test: a launch
    costs ~35 CPU-s (three processes importing torch and vLLM), and vLLM reloads full
    weights on a LoRA-enabled server (the LoRA layers' base weights) as on a plain one.
    Tests that need a shorter context give their engine `max_model_len=MAX_LEN` (an engine
    keeps the smaller of its own and its server's)."""
    from swarmrl_server.engine.adapter import LoraSlots

    yield from launch_vllm(tiny_model_dir, tmp_path_factory.mktemp("vllm"),
                           max_model_len=LONG_CONTEXT,
                           extra_args=LoraSlots(2, 8).serve_args(),
                           extra_env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"})


VLLM_LOGS: dict[str, Path] = {}
"""The log of each server `launch_vllm` started, by URL."""


def launch_vllm(model_dir: Path, log_dir: Path, max_model_len: int, **kwargs: Any
                ) -> Iterator[str]:
    """Starts `vllm serve` exactly as `LaunchedServer` does, yields its URL, stops it."""
    from swarmrl_server.engine.vllm.server import LaunchedServer

    if not VLLM_PYTHON.exists():  # a failure, not a skip: `make test` builds it
        pytest.fail(f"no vLLM venv at {VLLM_PYTHON}: run `make vllm-venv`")
    server = LaunchedServer("tiny", model_dir, python=VLLM_PYTHON, log_dir=log_dir,
                            max_model_len=max_model_len, **kwargs)
    proc = server._spawn()
    VLLM_LOGS[server.url] = server.log_path
    try:
        deadline = time.monotonic() + 400
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited ({proc.returncode}):\n"
                            + server.log_path.read_text()[-3000:])
            try:
                if httpx.get(f"{server.url}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("vllm serve not healthy after 400 s:\n" + server.log_path.read_text()[-3000:])
            time.sleep(0.5)
        yield server.url
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


async def make_engine(kind: str, model_dir: Path, vllm_url: str = "", **kwargs: object) -> Engine:
    """A started engine named `kind` ("hf", "echo" or "vllm", attached to `vllm_url`)."""
    engine: Engine
    if kind == "hf":
        from swarmrl_server.engine.hf.engine import HFEngine

        engine = HFEngine.from_pretrained(kind, model_dir, max_model_len=MAX_LEN, **kwargs)
    elif kind == "echo":
        from swarmrl_server.engine.echo import EchoEngine

        engine = EchoEngine.from_pretrained(kind, model_dir, max_model_len=MAX_LEN, **kwargs)
    elif kind == "vllm":
        from swarmrl_server.engine.vllm.engine import VLLMEngine

        engine = VLLMEngine(kind, model_dir, urls=[vllm_url], max_model_len=MAX_LEN,
                            **kwargs)  # type: ignore[arg-type]
    else:
        raise ValueError(kind)
    await engine.start()
    return engine


def random_adapters(model_dir: Path, seeds: Sequence[int], rank: int = 8,
                    base: torch.nn.Module | None = None
                    ) -> tuple[Any, list[dict[str, torch.Tensor]]]:
    """The model at `model_dir` (or `base`, that model loaded and changed) wrapped in a
    rank-`rank` LoRA adapter (swarmrl's trainer wrapping), and one adapter per seed: lora_B
    drawn from N(0, 0.05), so that (unlike peft's B = 0 start) each changes the model's
    output. The model ends holding the last."""
    import torch

    from swarmrl_server.models import load_model
    from swarmrl_server.trainer import lora
    from swarmrl_server.trainer.config import TrainerConfig

    model = lora.wrap(load_model(model_dir)[0] if base is None else base,
                      TrainerConfig.from_options({"lora_rank": str(rank)})).eval()
    adapters = []
    for seed in seeds:
        torch.manual_seed(seed)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0, 0.05)
        adapters.append(lora.adapter_tensors(model))
    return model, adapters
