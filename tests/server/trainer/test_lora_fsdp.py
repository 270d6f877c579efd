"""FSDP2 with LoRA (gloo, real processes) equals one process: two workers train the
adapter of the same batch as the one-process LoRA StepRunner (two AdamW updates, tree
packing, grammar-masked calls, KL to the base with the adapter off), to 1e-5 in every adapter tensor; only the
adapter has optimizer state, and the sharded checkpoint holds no frozen base weights
(but the tied output head)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from swarmrl_server.timelines.grammar import GrammarReplay
from swarmrl_server.trainer import lora
from swarmrl_server.trainer.config import TrainerConfig
from swarmrl_server.trainer.setup import build_optimizer, build_policy, reference_for
from swarmrl_server.trainer.step import StepRunner, forward_for
from tests.fsdp_support import OPTIONS, fsdp_batch
from tests.helpers import free_port

pytestmark = pytest.mark.slow

LORA = {**OPTIONS, "lora_rank": "4", "lora_alpha": "8", "kl_coef": "0.05"}


def _worker(rank: int, port: int, model_dir: str, blob: bytes, out: str) -> None:
    from swarmrl_server.trainer.distributed import TrainerWorker

    torch.set_num_threads(1)
    config = TrainerConfig.from_options(LORA)
    w = TrainerWorker(rank, 2, "127.0.0.1", port, model_dir, config.to_dict())
    try:
        assert w.runner.ref_model is w.model
        stats = w.step(blob, w.runner.advantages(pickle.loads(blob)))
        adapter = w.state_dict()
        w.save(str(Path(out).parent / "ckpt"))
        if rank == 0:
            torch.save({"adapter": adapter, "loss": stats.loss, "kl": stats.kl_ref,
                        "optimizer_params": len(w.optimizer.state)}, out)
    finally:
        w.close()


def test_two_fsdp2_lora_workers_equal_one_process(tiny_model_dir: Path, tmp_path: Path) -> None:
    episodes = fsdp_batch(tiny_model_dir)
    config = TrainerConfig.from_options(LORA)
    policy = build_policy(tiny_model_dir, config, placement=None)
    from swarmrl_server.trainer.device import CPU

    runner = StepRunner(policy.model, build_optimizer(policy.model, config), config,
                        pad_id=policy.pad_id, forward=forward_for(True),
                        grammar=GrammarReplay.for_model(tiny_model_dir),
                        **reference_for(policy, tiny_model_dir, config, CPU))
    ref = runner.run(episodes)
    want = lora.adapter_tensors(policy.model)

    out = tmp_path / "rank0.pt"
    mp.spawn(_worker, args=(free_port(), str(tiny_model_dir), pickle.dumps(episodes), str(out)),
             nprocs=2, join=True)
    got = torch.load(out, weights_only=False)
    assert got["adapter"].keys() == want.keys()  # the adapter alone is what a sync moves
    assert got["optimizer_params"] == len(runner.optimizer.state) == len(want)
    assert got["loss"] == pytest.approx(ref.loss, rel=1e-4, abs=1e-6)
    assert got["kl"] == pytest.approx(ref.kl_ref, rel=1e-3, abs=1e-8) and ref.kl_ref > 0
    moved = max(float(v.abs().max()) for k, v in want.items() if "lora_B" in k)
    assert moved > 1e-4
    diff = max(float((want[k] - got["adapter"][k]).abs().max()) for k in want)
    assert diff <= 1e-5, f"max abs adapter difference {diff}"
    # The shards hold the adapter and its optimizer state, not the frozen base (but for
    # the output head tied to the embeddings, which DCP lists under the head's name).
    from torch.distributed.checkpoint import FileSystemReader

    meta = FileSystemReader(str(tmp_path / "ckpt" / "sharded")).read_metadata()
    model_keys = [k for k in meta.state_dict_metadata if k.startswith("model.")]
    frozen = [k for k in model_keys if "lora_" not in k]
    assert len(model_keys) - len(frozen) == len(want) and frozen == [
        "model.base_model.model.lm_head.weight"]
