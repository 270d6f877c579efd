"""Advantages and losses come from verl, per episode; a step moves the policy the right way."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from swarmrl_server.timelines.logprobs import forward_timelines
from swarmrl_server.timelines.merge import merge_calls
from swarmrl_server.trainer import algorithms
from swarmrl_server.trainer.config import TrainerConfig, TrainerConfigError
from swarmrl_server.trainer.step import (
    EpisodeRows,
    StepRunner,
    episode_rows,
    gather,
    generated_mask,
)
from tests.trainer_support import (
    MODEL,
    current_logprobs,
    fresh_model,
    make_episode,
    multi_turn_calls,
    per_call_rows,
    two_episode_group,
)

OUTCOME_ESTIMATORS = ["grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "reinforce_plus_plus",
                      "reinforce_plus_plus_baseline", "grpo_passk", "opo", "gpg"]


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    from swarmrl_server.models import load_model

    return load_model(tiny_model_dir)


def runner(model: torch.nn.Module, **options: str) -> StepRunner:
    config = TrainerConfig.from_options({"group_size": "0", **options})
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    return StepRunner(model, opt, config, pad_id=3)


# -- advantages ------------------------------------------------------------------------


@pytest.mark.parametrize("name", OUTCOME_ESTIMATORS)
def test_advantages_are_verls_function_on_the_same_inputs(name: str) -> None:
    from verl.trainer.config.algorithm import AlgoConfig
    from verl.trainer.ppo import core_algos

    torch.manual_seed(0)
    rewards_E = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0, 0.0, 1.0, 0.25])
    mask_E_L = torch.zeros(8, 6)
    for i, n in enumerate([6, 3, 4, 6, 2, 5, 1, 6]):
        mask_E_L[i, :n] = 1
    uids = ["a", "a", "a", "a", "b", "b", "b", "b"]
    config = TrainerConfig(adv_estimator=name)
    ours = algorithms.compute_advantages(rewards_E, mask_E_L, uids, config)

    token_rewards = torch.zeros(8, 6)
    for i in range(8):
        token_rewards[i, int(mask_E_L[i].sum()) - 1] = rewards_E[i]
    kwargs = dict(token_level_rewards=token_rewards, response_mask=mask_E_L,
                  config=AlgoConfig(adv_estimator=name), index=np.array(uids, dtype=object))
    if name.startswith("grpo"):
        kwargs["norm_adv_by_std_in_grpo"] = True
    theirs, _ = core_algos.get_adv_estimator_fn(name)(**kwargs)
    torch.testing.assert_close(ours, theirs * mask_E_L, rtol=0, atol=0)


def test_grpo_advantage_is_per_episode_whatever_the_rows() -> None:
    """One advantage per episode (broadcast over its tokens), from its group's rewards."""
    config = TrainerConfig()
    rewards_E = torch.tensor([1.0, 0.0, 1.0])
    mask_E_L = torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    adv_E_L = algorithms.compute_advantages(rewards_E, mask_E_L, ["g"] * 3, config)
    expected = torch.tensor([0.5774, -1.1547, 0.5774])
    torch.testing.assert_close(adv_E_L[:, 0], expected, atol=1e-3, rtol=0)
    assert torch.all(adv_E_L[0] == adv_E_L[0, 0]) and torch.all(adv_E_L[1, 2:] == 0)


# -- config validation -----------------------------------------------------------------


@pytest.mark.parametrize(("key", "value", "listed"), [
    ("adv_estimator", "ppo_magic", "grpo"),
    ("policy_loss", "nope", "vanilla"),
    ("loss_agg_mode", "mean", "seq-mean-token-mean"),
    ("kl_penalty", "l2", "low_var_kl"),
])
def test_unknown_names_fail_at_startup_listing_the_valid_ones(key: str, value: str, listed: str) -> None:
    with pytest.raises(TrainerConfigError) as info:
        TrainerConfig.from_options({key: value})
    assert value in str(info.value) and listed in str(info.value)


def test_valid_names_are_verls_registries() -> None:
    from verl.trainer.ppo import core_algos

    assert set(algorithms.valid_policy_losses()) == set(core_algos.POLICY_LOSS_REGISTRY)
    assert {"grpo", "rloo", "reinforce_plus_plus"} <= set(algorithms.valid_adv_estimators())
    # The defaults, which validating does not look up (choices.DEFAULT_*), are registered.
    config = TrainerConfig()
    assert config.adv_estimator in algorithms.valid_adv_estimators()
    assert config.policy_loss in core_algos.POLICY_LOSS_REGISTRY
    with pytest.raises(TrainerConfigError, match="critic"):
        TrainerConfig.from_options({"adv_estimator": "gae"})
    for mode in algorithms.LOSS_AGG_MODES:  # each mode is one verl's agg_loss knows
        core_algos.agg_loss(torch.ones(2, 3), torch.ones(2, 3), mode)


def test_validating_the_default_algorithms_does_not_import_verl() -> None:
    """`study run` validates every run's options; verl costs ~8 CPU-s to import. (Other
    names are looked up in verl's registry: test_unknown_names_fail_at_startup_listing_the_valid_ones.)"""
    code = ("import sys\n"
            "from swarmrl_server.trainer.config import TrainerConfig\n"
            "TrainerConfig.from_options({'lr': '1e-4', 'batch_size': '4'})\n"
            "assert 'verl' not in sys.modules, 'verl was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def test_bad_option_keys_and_values_are_rejected() -> None:
    with pytest.raises(TrainerConfigError, match="valid options"):
        TrainerConfig.from_options({"learning_rate": "1e-4"})
    with pytest.raises(TrainerConfigError, match="lr"):
        TrainerConfig.from_options({"lr": "fast"})
    with pytest.raises(TrainerConfigError, match="batch_rule"):
        TrainerConfig.from_options({"batch_rule": "whenever"})
    config = TrainerConfig.from_options({"lr": "3e-4", "mode": "sync", "packing": "false",
                                         "clip_ratio_high": "0.28"})
    assert (config.lr, config.mode, config.packing, config.clip_ratio_high) == (3e-4, "sync", False, 0.28)


# -- a training step -------------------------------------------------------------------


def sequence_logprob(model: torch.nn.Module, episode: EpisodeRows, pad_id: int) -> float:
    """Sum of the current logprobs of an episode's generated tokens."""
    with torch.no_grad():
        logprobs_R, _ = forward_timelines(model, episode.rows, pad_id)
        return float(gather([episode], logprobs_R, max(episode.num_generated, 1)).sum())


@pytest.mark.parametrize("loss", ["vanilla", "gspo", "cispo"])
def test_a_step_raises_the_logprob_of_the_positive_advantage_episode(tiny_model_dir: Path, loss: str) -> None:
    model = fresh_model(tiny_model_dir)
    good, bad = two_episode_group(model)
    before = sequence_logprob(model, good, 3), sequence_logprob(model, bad, 3)
    stats = runner(model, lr="1e-3", policy_loss=loss).run([good, bad])
    after = sequence_logprob(model, good, 3), sequence_logprob(model, bad, 3)
    assert after[0] > before[0] and after[1] < before[1], (before, after)
    assert stats.updates == 1 and stats.tokens_trained == good.num_generated + bad.num_generated


@pytest.mark.parametrize("mode", list(algorithms.LOSS_AGG_MODES))
def test_an_episode_split_into_3_rows_weighs_the_same_as_one_kept_as_1(tiny_model_dir: Path, mode: str) -> None:
    """X (3 rows) and Y (1 row) generated the same tokens in the same contexts, with
    opposite advantages: if they weigh the same, their gradients cancel exactly."""
    model = fresh_model(tiny_model_dir)
    completions = [[700, 2], [810, 811, 2], [920, 2]]
    x_calls = current_logprobs(model, multi_turn_calls("x", random.Random(0), completions=completions))
    y_calls = current_logprobs(model, multi_turn_calls("y", random.Random(0), completions=completions))
    x = EpisodeRows("x", "g", "t", 1.0, per_call_rows(x_calls))
    y = EpisodeRows("y", "g", "t", 0.0, merge_calls(y_calls)[0])
    assert (len(x.rows), len(y.rows)) == (3, 1)
    r = runner(model, loss_agg_mode=mode)
    adv = r.advantages([x, y])
    assert adv[0, 0] > 0 > adv[1, 0]
    model.zero_grad()
    loss = _loss_and_grad(r, [x, y], adv)
    grad = _flat_grad(model)
    # Scale: the same batch with both advantages positive (nothing cancels).
    model.zero_grad()
    loss_same_sign = _loss_and_grad(r, [x, y], adv.abs())
    scale = _flat_grad(model).abs().max()
    assert abs(loss) < 1e-5 * abs(loss_same_sign) and grad.abs().max() < 1e-4 * scale, (
        loss, loss_same_sign, grad.abs().max(), scale)

    # And with X kept as one row instead, nothing changes at all.
    x_merged = EpisodeRows("x", "g", "t", 1.0, merge_calls(x_calls)[0])
    z_calls = current_logprobs(model, multi_turn_calls("z", random.Random(5)))
    ys = [EpisodeRows("z", "g", "t", 0.3, merge_calls(z_calls)[0])]
    model.zero_grad()
    loss_split = _loss_and_grad(r, [x, *ys], r.advantages([x, *ys]))
    g_split = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    loss_merged = _loss_and_grad(r, [x_merged, *ys], r.advantages([x_merged, *ys]))
    # The loss is a sum of O(1) terms that nearly cancel: fp32 rounding of the terms
    # (~1e-7 each) is the tolerance, the gradients below are the real comparison.
    assert loss_split == pytest.approx(loss_merged, rel=1e-5, abs=1e-6)
    g_merged = [p.grad for p in model.parameters()]
    tol = 1e-5 * max(float(g.abs().max()) for g in g_merged)
    for a, b in zip(g_split, g_merged):
        torch.testing.assert_close(a, b, atol=tol, rtol=1e-4)


def _flat_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def _loss_and_grad(r: StepRunner, episodes: list[EpisodeRows], adv: torch.Tensor) -> float:
    mask = generated_mask(episodes)
    algorithms.set_global_batch(r.actor_cfg, num_tokens=int(mask.sum()), num_episodes=len(episodes),
                                loss_scale_factor=mask.shape[1])
    loss, _, _ = r._micro_batch_loss(episodes, adv, mask, mask.shape[1])
    loss.backward()
    return float(loss.detach())


def test_micro_batching_by_token_budget_gives_the_whole_batch_gradient(tiny_model_dir: Path) -> None:
    rng = random.Random(1)
    episodes = []
    model = fresh_model(tiny_model_dir)
    for i in range(6):
        calls = current_logprobs(model, multi_turn_calls(f"e{i}", rng, turns=1 + i % 3, split=i % 2 == 1))
        episodes.append(episode_rows(make_episode(f"e{i}", float(i % 3) / 2, calls, group_id=f"g{i % 2}"),
                                     MODEL, f"g{i % 2}")[0])
    grads = []
    for budget in ("100000", "1"):  # one micro-batch vs one episode at a time
        m = fresh_model(tiny_model_dir)
        config = TrainerConfig.from_options({"group_size": "0", "micro_batch_tokens": budget,
                                             "loss_agg_mode": "seq-mean-token-mean", "grad_clip": "0"})
        # Plain SGD with lr 1: the parameter change is exactly minus the accumulated gradient.
        r = StepRunner(m, torch.optim.SGD(m.parameters(), lr=1.0), config, pad_id=3)
        stats = r.run(episodes)
        grads.append((stats.micro_batches, stats.loss, [p.detach().clone() for p in m.parameters()]))
    assert grads[0][0] == 1 and grads[1][0] == 6
    assert grads[0][1] == pytest.approx(grads[1][1], abs=1e-6)
    for a, b in zip(grads[0][2], grads[1][2]):  # the same update, however it was split
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


def test_kl_to_the_frozen_reference_is_added_when_configured(tiny_model_dir: Path) -> None:
    model, ref = fresh_model(tiny_model_dir), fresh_model(tiny_model_dir)
    good, bad = two_episode_group(model)
    config = TrainerConfig.from_options({"group_size": "0", "kl_coef": "0.5", "lr": "1e-2"})
    r = StepRunner(model, torch.optim.AdamW(model.parameters(), lr=1e-2), config, pad_id=3,
                   ref_model=ref)
    first = r.run([good, bad])
    second = r.run([good, bad])
    assert first.kl_ref == pytest.approx(0.0, abs=1e-6)  # same weights as the reference
    assert second.kl_ref > 0 and "actor/kl_ref" in second.to_metrics()


def test_a_model_trains_only_on_its_own_calls() -> None:
    rng = random.Random(0)
    calls = multi_turn_calls("e", rng, turns=2)
    calls[1].model = "critic"
    rows, stats = episode_rows(make_episode("e", 1.0, calls, models=[MODEL, "critic"]), MODEL, "g")
    assert stats.calls == 1 and rows.num_generated == len(calls[0].completion_ids)


def test_packing_gives_the_same_step_as_plain_rows(tiny_model_dir: Path) -> None:
    from swarmrl_server.trainer.step import packed_forward

    rng = random.Random(3)
    model = fresh_model(tiny_model_dir)
    episodes = []
    for i in range(4):  # one group: the same first prompt, so the rows share a prefix
        calls = current_logprobs(model, multi_turn_calls(f"e{i}", rng, turns=2, split=i == 3))
        episodes.append(episode_rows(make_episode(f"e{i}", float(i % 2), calls), MODEL, "g")[0])
    results = []
    for forward in (None, packed_forward()):
        m = fresh_model(tiny_model_dir)
        config = TrainerConfig.from_options({"group_size": "0", "grad_clip": "0"})
        r = StepRunner(m, torch.optim.SGD(m.parameters(), lr=1.0), config, pad_id=3,
                       forward=forward)
        stats = r.run(episodes)
        results.append((stats.loss, [p.detach().clone() for p in m.parameters()]))
    assert results[0][0] == pytest.approx(results[1][0], abs=1e-5)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


POLICY_LOSSES = ["bypass_mode", "cispo", "clip_cov", "dppo_kl", "dppo_tv", "dro", "geo_mean", "gpg",
                 "gspo", "kl_cov", "sapo", "vanilla"]
"""verl 0.9.1's POLICY_LOSS_REGISTRY (spelled out: reading it at collection imports verl)."""


def test_the_list_of_policy_losses_is_verls() -> None:
    assert algorithms.valid_policy_losses() == POLICY_LOSSES


@pytest.mark.parametrize("loss", POLICY_LOSSES)
def test_every_registered_policy_loss_trains(tiny_model_dir: Path, loss: str) -> None:
    model = fresh_model(tiny_model_dir)
    good, bad = two_episode_group(model)
    extra = {"dro_beta": "0.1"} if loss == "dro" else {}
    stats = runner(model, policy_loss=loss, lr="1e-3", **extra).run([good, bad])
    assert stats.updates == 1 and torch.isfinite(torch.tensor(stats.loss))
    assert 0 < stats.grad_norm < float("inf")
