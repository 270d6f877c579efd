"""`swarmrl top` against a running server, and `swarmrl plot` on real training runs."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from rich.console import Console

import swarmrl
from swarmrl._cli import main as cli_main
from swarmrl._top import main as top_main
from tests.helpers import wait_for_step
from tests.observe_support import TRAIN_OPTIONS
from tests.server_fixtures import ServerFactory


@pytest.fixture
async def running(make_server: ServerFactory) -> Any:
    return await make_server(http=True, train=TRAIN_OPTIONS)


async def test_top_once_shows_models_trainer_clients_episodes_and_errors(running: Any) -> None:
    config = swarmrl.ClientConfig(target=running.grpc_target, client_name="quiz-runner-7",
                                  agent_version="v7")
    async with swarmrl.AsyncSwarmClient(config=config) as client:
        for i in range(2):  # one training step
            async with client.episode(task_id="fruit", agent_version="v7") as ep:
                await ep.chat([{"role": "user", "content": "Hi"}], max_tokens=3, seed=i)
                await ep.reward(float(i))
        await wait_for_step(running.swarm.models["tiny"].trainer, 1, timeout=120)
        async with client.episode(task_id="fruit", agent_version="v7") as ep:  # waits: 1 of 2
            await ep.chat([{"role": "user", "content": "Hi"}], max_tokens=3, seed=5)
            await ep.reward(1.0)
        open_ep = await client.start_episode(task_id="riddle", agent_version="v8")
        await open_ep.chat([{"role": "user", "content": "Hm"}], max_tokens=2)
        with pytest.raises(swarmrl.NotFoundError):
            await client.get_episode("ep-nope")

        out = io.StringIO()
        console = Console(file=out, width=200, color_system=None)
        code = await asyncio.to_thread(top_main, [
            "--target", running.grpc_target, "--http", running.http.base_url,
            "--once", "--interval", "0.2"], console=console)
        await open_ep.abort("test over")
    text = out.getvalue()
    assert code == 0, text
    lines = text.splitlines()

    def row(*cells: str) -> list[str]:
        """The cells of the first table row that has all of `cells`."""
        for line in lines:
            found = [c.strip() for c in line.strip("│ ").split("│")]
            if all(c in found for c in cells):
                return found
        raise AssertionError(f"no row with {cells} in:\n{text}")

    assert "state serving" in text and "calls/s" in text and "tokens/s" in text
    assert "1 open / 3 ended / 0 aborted" in text
    # model, policy version, trainable, inflight, waiting, trainer step, pending
    assert row("tiny", "yes")[:7] == ["tiny", "1", "yes", "0", "0", "1", "1"]
    assert row("tiny", "fruit") == ["tiny", "fruit", "1", "2 episodes (episodes)"]
    # The client (ListClients): its agent versions, tasks, open / ended / aborted episodes.
    assert row("quiz-runner-7")[2:7] == ["v7, v8", "fruit, riddle", "1", "3", "0"]
    assert row("v7")[:6] == ["v7", "0", "3", "0", "2", "0.667"]  # rewards 0, 1, 1; 2 trained
    assert row("v8")[:6] == ["v8", "1", "0", "0", "0", "0.000"]
    assert row(open_ep.id)[1:5] == ["riddle", "v8", "tiny", "1"]  # one call so far
    assert row("grpc", "GetEpisode", "NOT_FOUND")[-1] == "unknown episode 'ep-nope'"

def test_top_reports_an_unreachable_server(capsys: pytest.CaptureFixture[str]) -> None:
    code = top_main(["--target", "127.0.0.1:1", "--http", "http://127.0.0.1:1", "--once",
                     "--interval", "0", "--wait", "0.3"])
    assert code == 1 and "127.0.0.1:1" in capsys.readouterr().err


def _write_run(run: Path, rewards: list[float], task: str) -> None:
    data = run / "data"
    data.mkdir(parents=True)
    with open(data / "metrics.jsonl", "w") as f:
        for step, r in enumerate(rewards, 1):
            f.write(json.dumps({
                "model": "tiny", "step": step, "time": 100.0 + step,
                "reward/mean": r, f"reward/{task}/mean": r, "loss/total": 0.5 / step,
                "actor/ppo_kl": 0.01 * step, "actor/entropy": 2.0, "actor/pg_clipfrac": 0.1,
                "merge/compression": 1.5, "actor/tokens_trained": 200.0,
                "reward/episodes": 8.0, "time/step_s": 0.4}) + "\n")


def test_plot_writes_one_png_per_task_and_overlays_runs(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _write_run(tmp_path / "a", [0.1, 0.2, 0.4, 0.5], "fruit/quiz")
    _write_run(tmp_path / "b", [0.3, 0.3, 0.2, 0.6], "riddle")
    out = tmp_path / "plots"
    assert cli_main(["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["merge.png", "reward-all.png", "reward-fruit_quiz.png", "reward-riddle.png",
                     "throughput.png", "training.png"]
    for name in names:
        with Image.open(out / name) as img:
            assert img.format == "PNG" and img.width > 300
    assert str(out / "training.png") in capsys.readouterr().out
    assert cli_main(["plot", str(tmp_path / "missing")]) == 1


def test_plot_draws_val_curves_from_run_cards_and_prints_their_time_average(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def val(minutes: float, success: float, reward: float) -> dict[str, object]:
        return {"split": "val", "train_seconds": 60 * minutes, "figures": {
            "success_rate": success, "success_ci95": [0.0, success + 0.2], "mean_reward": reward}}

    _write_run(tmp_path / "fast", [0.1, 0.2], "t")
    _write_run(tmp_path / "slow", [0.1, 0.2], "t")
    (tmp_path / "fast" / "card.json").write_text(json.dumps({"evals": [
        val(0, 0.0, 0.0), val(10, 0.1, 0.2), {"split": "test", "figures": {}}, val(20, 0.1, 0.4)]}))
    (tmp_path / "slow" / "card.json").write_text(json.dumps({"evals": [
        val(20, 0.1, 0.4), val(0, 0.0, 0.0)]}))  # out of order: sorted by training time
    out = tmp_path / "plots"
    assert cli_main(["plot", str(tmp_path / "fast"), str(tmp_path / "slow"),
                     "--out", str(out)]) == 0
    with Image.open(out / "validation.png") as img:
        assert img.format == "PNG"
    printed = capsys.readouterr().out
    # fast: (0 + 0.1) / 2 * 10 + 0.1 * 10 over 20 minutes; slow: (0 + 0.1) / 2 * 20 over 20
    assert ("fast: val over 20.0 training minutes, time-averaged: success 0.075, reward 0.200;"
            " last: success 0.100, reward 0.400") in printed
    assert "slow: val over 20.0 training minutes, time-averaged: success 0.050, reward 0.200" in printed
