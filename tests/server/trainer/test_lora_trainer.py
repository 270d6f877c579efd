"""LoRA training (trainer/lora.py) on the tiny model: a step equals a plain peft step, only
the adapter learns and has optimizer state, the KL reference is the base with the adapter
off, and an adapter checkpoint resumes bit for bit."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from swarmrl_server.trainer import checkpoint, lora
from swarmrl_server.trainer.config import TrainerConfig, TrainerConfigError
from swarmrl_server.trainer.step import EpisodeRows, StepRunner, episode_rows
from tests.trainer_support import MODEL, current_logprobs, make_episode, multi_turn_calls

OPTIONS = {"lora_rank": "4", "lora_alpha": "8", "lr": "1e-2", "group_size": "0",
           "ppo_epochs": "2", "device": "cpu"}


def episodes(model: torch.nn.Module) -> list[EpisodeRows]:
    """One GRPO group of 4 multi-turn episodes, recorded with `model`'s own logprobs."""
    rng = random.Random(3)
    out = []
    for i, reward in enumerate([1.0, 0.0, 0.5, 0.0]):
        calls = current_logprobs(model, multi_turn_calls(f"e{i}", rng, turns=2))
        out.append(episode_rows(make_episode(f"e{i}", reward, calls), MODEL, "g")[0])
    return out


def lora_runner(model_dir: Path, config: TrainerConfig) -> StepRunner:
    from swarmrl_server.models import load_model

    torch.manual_seed(0)  # the adapter's A init
    model = lora.wrap(load_model(model_dir)[0], config)
    model.train()
    opt = torch.optim.AdamW(lora.trainable(model), lr=config.lr, weight_decay=config.weight_decay)
    return StepRunner(model, opt, config, pad_id=3, ref_model=model if config.kl_coef else None,
                      ref_context=lora.reference)


def plain_peft_step(model_dir: Path, batch: list[EpisodeRows], config: TrainerConfig
                    ) -> tuple[torch.nn.Module, list[float]]:
    """The same step written directly against peft and torch: GRPO advantages, PPO-clip
    token-mean loss, clipped gradient norm, AdamW over the adapter, ppo_epochs times."""
    from peft import LoraConfig, get_peft_model

    from swarmrl_server.models import load_model

    torch.manual_seed(0)
    model = get_peft_model(load_model(model_dir)[0], LoraConfig(
        r=4, lora_alpha=8, target_modules="all-linear", lora_dropout=0.0, task_type="CAUSAL_LM"))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    rewards = torch.tensor([e.reward for e in batch])
    adv = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
    losses = []
    for _ in range(config.ppo_epochs):
        total, n = torch.zeros(()), 0
        for a, e in zip(adv, batch):
            for row in e.rows:
                ids = torch.tensor([row.token_ids])
                logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
                lp = logp.gather(1, ids[0, 1:, None])[:, 0]
                mask = torch.tensor(row.loss_mask[1:], dtype=torch.bool)
                ratio = torch.exp(lp[mask] - torch.tensor(row.old_logprobs[1:])[mask])
                pg = torch.maximum(-a * ratio, -a * ratio.clamp(0.8, 1.2))
                if a < 0:
                    pg = torch.minimum(pg, -a * 3.0)
                total, n = total + pg.sum(), n + int(mask.sum())
        loss = total / n
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return model, losses


def test_a_lora_step_equals_a_plain_peft_step(tiny_model_dir: Path) -> None:
    from swarmrl_server.models import load_model

    config = TrainerConfig.from_options(OPTIONS)
    base = load_model(tiny_model_dir)[0]
    batch = episodes(base)
    runner = lora_runner(tiny_model_dir, config)
    stats = runner.run(batch)
    ref_model, ref_losses = plain_peft_step(tiny_model_dir, batch, config)

    assert stats.updates == 2
    assert stats.loss == pytest.approx(sum(ref_losses) / 2, abs=1e-6)
    got = lora.adapter_tensors(runner.model)
    want = lora.adapter_tensors(ref_model)
    layers = base.config.num_hidden_layers
    assert got.keys() == want.keys() and len(got) == 2 * 7 * layers  # A and B of 7 linears
    moved = max(float(v.abs().max()) for k, v in got.items() if "lora_B" in k)
    assert moved > 1e-3, "B starts at 0: the step must move it for the comparison to mean much"
    # Within 1 % of one AdamW step (lr 1e-2): Adam divides every gradient entry by its own
    # scale, so entries whose gradient is near 0 turn summation-order noise into ~1e-5.
    for k in got:
        torch.testing.assert_close(got[k], want[k], atol=1e-4, rtol=0)
    # Only the adapter learned, and only it has AdamW state.
    frozen = {n.replace(".base_layer", ""): p for n, p in
              runner.model.get_base_model().named_parameters() if "lora_" not in n}
    assert frozen.keys() == dict(base.named_parameters()).keys()
    for name, p in base.named_parameters():
        assert not frozen[name].requires_grad and torch.equal(frozen[name], p), name
    state = runner.optimizer.state
    assert len(state) == len(got) and all(p.requires_grad for p in state)
    assert sum(p.numel() for p in state) < 0.05 * sum(p.numel() for p in base.parameters())


def test_the_kl_reference_is_the_base_with_the_adapter_off(tiny_model_dir: Path) -> None:
    from swarmrl_server.models import load_model

    config = TrainerConfig.from_options({**OPTIONS, "kl_coef": "0.1", "ppo_epochs": "1"})
    base = load_model(tiny_model_dir)[0]
    batch = episodes(base)
    runner = lora_runner(tiny_model_dir, config)
    assert runner.ref_model is runner.model  # no second copy of the weights
    runner.run(batch)
    stats = runner.run(batch)  # the adapter has moved: the policy is no longer the base
    assert stats.kl_ref > 0
    ids = torch.tensor([batch[0].rows[0].token_ids])
    with torch.no_grad(), lora.reference(runner.model):
        ref_logits = runner.model(input_ids=ids).logits
    with torch.no_grad():
        policy_logits = runner.model(input_ids=ids).logits
        base_logits = base(input_ids=ids).logits
    torch.testing.assert_close(ref_logits, base_logits, atol=0, rtol=0)
    assert (policy_logits - base_logits).abs().max() > 1e-4


def test_an_adapter_checkpoint_resumes_bit_for_bit(tiny_model_dir: Path, tmp_path: Path) -> None:
    from swarmrl_server.models import load_model

    config = TrainerConfig.from_options(OPTIONS)
    batch = episodes(load_model(tiny_model_dir)[0])
    first = lora_runner(tiny_model_dir, config)
    first.run(batch)
    state = checkpoint.TrainerState(model=MODEL, step=1, policy_version=1,
                                    config=config.to_dict(), consumed=[])
    path = checkpoint.save(tmp_path, state, first.model, first.optimizer, source_dir=tiny_model_dir)
    assert (path / "adapter_model.safetensors").is_file() and not (path / "model.safetensors").exists()
    adapter_bytes = (path / "adapter_model.safetensors").stat().st_size
    assert adapter_bytes < 0.05 * (tiny_model_dir / "model.safetensors").stat().st_size

    torch.manual_seed(123)  # a different A init: everything must come from the checkpoint
    second = lora_runner(tiny_model_dir, config)
    assert checkpoint.load_into(path, second.model, second.optimizer).step == 1
    for k, v in lora.adapter_tensors(first.model).items():
        assert torch.equal(lora.adapter_tensors(second.model)[k], v), k
    a, b = first.run(batch), second.run(batch)
    assert a.loss == b.loss and a.grad_norm == b.grad_norm
    for k, v in lora.adapter_tensors(first.model).items():
        assert torch.equal(lora.adapter_tensors(second.model)[k], v), k

    # A full fine-tuning model refuses an adapter checkpoint, naming what to do.
    full = load_model(tiny_model_dir)[0]
    with pytest.raises(ValueError, match="lora_rank"):
        checkpoint.load_into(path, full, torch.optim.AdamW(full.parameters()))


@pytest.mark.parametrize(("options", "field"), [
    ({"lora_rank": "-1"}, "lora_rank"),
    ({"lora_rank": "eight"}, "lora_rank"),
    ({"lora_rank": "8", "lora_alpha": "0"}, "lora_alpha"),
    ({"lora_rank": "8", "lora_dropout": "1"}, "lora_dropout"),
    ({"lora_rank": "8", "lora_target_modules": "q_proj,,v_proj"}, "lora_target_modules"),
    ({"lora_rank": "8", "lora_target_modules": "all-linear,q_proj"}, "lora_target_modules"),
])
def test_bad_lora_options_are_refused_by_name(options: dict[str, str], field: str) -> None:
    with pytest.raises(TrainerConfigError, match=field):
        TrainerConfig.from_options(options)


def test_target_modules_the_model_lacks_are_refused_by_name(tiny_model_dir: Path) -> None:
    from swarmrl_server.models import load_model

    config = TrainerConfig.from_options({"lora_rank": "8", "lora_target_modules": "qkv_proj"})
    with pytest.raises(TrainerConfigError, match="lora_target_modules.*q_proj"):
        lora.wrap(load_model(tiny_model_dir)[0], config)
