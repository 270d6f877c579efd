"""FSDP2 data-parallel training (gloo, real processes) equals the one-process step.

Two workers (torch.multiprocessing spawn, a real gloo process group, `fully_shard`) train
one batch — tree packing on, episodes from 1 to 6 turns with completions of 2 to 40
tokens, some ending in a call decoded under a grammar (its mask replayed by each worker
from the rows' grammar spans), two GRPO groups, two mini-batches (two AdamW updates),
small micro-batches — and
the weights must match the plain one-process StepRunner's to 1e-5 (fp32). The reported
gradient norm must match too: AdamW's first step is blind to a uniform gradient scale, the
norm is not. Then a sharded checkpoint written by the 2 workers resumes on 1 worker.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from swarmrl_server.timelines.grammar import GrammarReplay
from swarmrl_server.trainer.config import TrainerConfig
from swarmrl_server.trainer.step import StepRunner
from tests.fsdp_support import OPTIONS, fsdp_batch
from tests.helpers import free_port

pytestmark = pytest.mark.slow


def _config() -> TrainerConfig:
    return TrainerConfig.from_options(OPTIONS)


def _worker(rank: int, ports: tuple[int, int], model_dir: str, blob: bytes, out: str) -> None:
    """Rank r of 2: one step, full weights, sharded save. Then rank 0 alone (a new group of
    1, in the same process to save a start-up) resumes the 2 workers' checkpoint."""
    from swarmrl_server.trainer.distributed import TrainerWorker

    torch.set_num_threads(1)
    ckpt = str(Path(out).parent / "ckpt")
    w = TrainerWorker(rank, 2, "127.0.0.1", ports[0], model_dir, _config().to_dict())
    try:
        episodes = pickle.loads(blob)
        advantages = w.runner.advantages(episodes)
        share = w.runner.dp.share(episodes)  # type: ignore[union-attr]
        stats = w.step(blob, advantages)
        sd = w.state_dict()
        w.save(ckpt)
    finally:
        w.close()
    if rank != 0:
        return
    one = TrainerWorker(0, 1, "127.0.0.1", ports[1], model_dir, _config().to_dict())
    try:
        resumed_from = one.load(ckpt)
        steps = sorted({float(s["step"]) for s in one.optimizer.state.values()})
        torch.save({"weights": sd, "grad_norm": stats.grad_norm, "loss": stats.loss,
                    "tokens": stats.tokens_trained, "share0": share,
                    "resumed": {"weights": one.state_dict(), "resumed_from": resumed_from,
                                "steps": steps}}, out)
    finally:
        one.close()


def test_two_fsdp2_workers_equal_one_process(tiny_model_dir: Path, tmp_path: Path) -> None:
    from swarmrl_server.models import load_model
    from swarmrl_server.trainer.distributed import balance_by_tokens
    from swarmrl_server.trainer.step import packed_forward

    episodes = fsdp_batch(tiny_model_dir)
    shares = balance_by_tokens(episodes, 2)
    tokens = [sum(episodes[i].num_tokens for i in s) for s in shares]
    assert all(shares) and sorted(shares[0] + shares[1]) == list(range(len(episodes)))
    assert max(tokens) - min(tokens) <= max(e.num_tokens for e in episodes)

    torch.manual_seed(0)
    model, _ = load_model(tiny_model_dir)
    config = _config()
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    ref = StepRunner(model, opt, config, pad_id=3, forward=packed_forward(),
                     grammar=GrammarReplay.for_model(tiny_model_dir)).run(episodes)
    ref_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}

    out = tmp_path / "rank0.pt"
    blob = pickle.dumps(episodes)
    mp.spawn(_worker, args=((free_port(), free_port()), str(tiny_model_dir), blob, str(out)),
             nprocs=2, join=True)
    got = torch.load(out, weights_only=False)
    assert got["share0"] == shares[0]
    assert got["tokens"] == ref.tokens_trained
    assert got["grad_norm"] == pytest.approx(ref.grad_norm, rel=1e-4)  # fp32 sum order
    assert got["loss"] == pytest.approx(ref.loss, rel=1e-4, abs=1e-6)
    moved = max(float((ref_weights[k] - v).abs().max()) for k, v in
                load_model(tiny_model_dir)[0].state_dict().items())
    assert moved > 1e-4, "the update must move the weights for the comparison to mean anything"
    diff = max(float((ref_weights[k] - got["weights"][k]).abs().max()) for k in ref_weights)
    print(f"max abs parameter difference {diff:.2e} (update moved weights by up to {moved:.2e})")
    assert diff <= 1e-5, f"max abs parameter difference {diff}"

    # The 2 workers' sharded checkpoint resumed on 1 worker: DCP reshards it.
    resumed = got["resumed"]
    assert resumed["resumed_from"] == 2
    assert resumed["steps"] == [2.0]  # the AdamW state came back too (two updates)
    for k, v in got["weights"].items():
        torch.testing.assert_close(resumed["weights"][k], v, atol=0, rtol=0)


def test_a_one_process_checkpoint_is_refused_by_sharded_workers(tmp_path: Path) -> None:
    from swarmrl_server.trainer.distributed import ShardedCheckpointError, load_sharded

    with pytest.raises(ShardedCheckpointError, match="one-process trainer"):
        load_sharded(tmp_path, torch.nn.Linear(1, 1), torch.optim.SGD([torch.zeros(1)], lr=1))
