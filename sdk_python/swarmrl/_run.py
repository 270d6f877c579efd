"""``swarmrl run -- CMD ...``: play episodes with an unmodified agent program.

The wrapper opens an episode, runs the command with ``OPENAI_BASE_URL`` /
``OPENAI_API_KEY`` (and ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY``) pointing at
that episode, so every model call the agent makes through its usual OpenAI or
Anthropic client (chat completions, the Responses API that the OpenAI Agents SDK's
default model speaks, or Anthropic messages) is recorded in it, then computes the reward and ends the
episode. An agent that crashes (non-zero exit, a signal, a timeout) or yields no
reward has its episode aborted: failures are never trained on.

Reward sources (pick one):

- ``--reward-file PATH`` (the default, with a fresh temporary path): the agent
  writes a number, or JSON ``{"reward": x}``, to ``$SWARMRL_REWARD_FILE``. With
  several models, ``{"reward": x, "model_rewards": {"solver": y}}`` gives single
  models their own reward (the others get ``x``).
- ``--reward-from-exit-code``: exit status 0 is reward 1.0, any other is 0.0.
- ``--reward-cmd CMD``: a shell command run after the agent exits 0; the last
  line it prints is the reward (it sees ``SWARMRL_EPISODE_ID``, ``SWARMRL_TASK_ID``
  and ``SWARMRL_EXIT_CODE``).

Exit status: 0 when every episode ended with a reward, 1 when any was aborted,
2 for bad usage or an unreachable server.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from swarmrl._config import DEFAULT_TARGET, ClientConfig
from swarmrl._errors import SwarmError
from swarmrl._sync import Episode, SwarmClient

_EPILOG = """\
examples:
  swarmrl run --task-id add-2-3 -- python my_agent.py
  swarmrl run --episodes 8 --reward-from-exit-code -- ./agent.sh
  swarmrl run --reward-cmd 'python score.py' -- node agent.js

The agent sees OPENAI_BASE_URL, OPENAI_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY,
SWARMRL_MODEL (the model to ask for), SWARMRL_EPISODE_ID, SWARMRL_TASK_ID,
SWARMRL_EPISODE_INDEX and, with a reward file, SWARMRL_REWARD_FILE.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="swarmrl run",
        description="Run an agent command in swarmrl episodes and report its rewards.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--target",
        default=os.environ.get("SWARMRL_TARGET", DEFAULT_TARGET),
        help="server gRPC address HOST:PORT (default: $SWARMRL_TARGET or %(default)s)",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("SWARMRL_API_KEY"),
        help="server API key (default: $SWARMRL_API_KEY)",
    )
    p.add_argument("--tls", action="store_true", help="connect with TLS")
    p.add_argument(
        "--task-id",
        default=os.environ.get("SWARMRL_TASK_ID", "default"),
        help="task the episodes play (default: $SWARMRL_TASK_ID or %(default)s)",
    )
    p.add_argument("--group-id", default=None, help="group within the task (default: task id)")
    p.add_argument("--agent-version", default="", help="version of the agent code")
    p.add_argument(
        "--model",
        action="append",
        default=[],
        help="model the episode may call (repeatable; default: the server's first)",
    )
    p.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="label stored with each episode (repeatable)",
    )
    p.add_argument("--episodes", type=int, default=1, help="how many episodes to play")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="kill an agent that runs longer (its episode is aborted)",
    )
    reward = p.add_mutually_exclusive_group()
    reward.add_argument(
        "--reward-file",
        type=Path,
        help="file the agent writes its reward to (default: a temp file)",
    )
    reward.add_argument(
        "--reward-from-exit-code",
        action="store_true",
        help="reward 1.0 for exit status 0, else 0.0",
    )
    reward.add_argument("--reward-cmd", help="shell command that prints the reward")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the agent command")
    return p


@dataclass
class Outcome:
    """How one episode went."""

    episode_id: str
    reward: float | None
    """The reward it ended with; None when it was aborted."""
    reason: str = ""
    """Why it was aborted."""
    exit_code: int | None = None


def _parse_reward(text: str, source: str) -> tuple[float, dict[str, float]]:
    """The episode's reward and the per-model rewards from a number or a JSON object."""
    text = text.strip()
    if not text:
        raise ValueError(f"{source} is empty")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(f"{source}: not a number: {text[:80]!r}") from None
    own: dict[str, float] = {}
    if isinstance(value, dict):
        raw = value.get("model_rewards") or {}
        if not isinstance(raw, dict):
            raise ValueError(f"{source}: model_rewards must be an object of model: reward")
        for model, r in raw.items():
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
                raise ValueError(f"{source}: model_rewards[{model!r}] is not a finite number")
            own[str(model)] = float(r)
        value = value.get("reward")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{source}: expected a finite number, got {text[:80]!r}")
    return float(value), own


class Runner:
    """Plays episodes of one agent command."""

    def __init__(self, args: argparse.Namespace, command: list[str]) -> None:
        self.args = args
        self.command = command
        self.child: subprocess.Popen[bytes] | None = None
        self.interrupted = False

    def child_env(self, ep: Episode, index: int, reward_file: Path | None) -> dict[str, str]:
        if not ep.openai_base_url:
            raise RuntimeError(
                "the server has no OpenAI-compatible HTTP endpoint (start it with --http-port)"
            )
        root = ep.openai_base_url.rstrip("/").removesuffix("/v1")
        env = dict(os.environ)
        env.update(
            {
                "OPENAI_BASE_URL": ep.openai_base_url,
                "OPENAI_API_KEY": ep.openai_api_key,
                # The Anthropic client appends /v1/messages to its base URL itself.
                "ANTHROPIC_BASE_URL": root,
                "ANTHROPIC_API_KEY": ep.openai_api_key,
                "SWARMRL_EPISODE_ID": ep.id,
                "SWARMRL_TASK_ID": self.args.task_id,
                "SWARMRL_EPISODE_INDEX": str(index),
                "SWARMRL_MODEL": ep.models[0].name if ep.models else "",
            }
        )
        if reward_file is not None:
            env["SWARMRL_REWARD_FILE"] = str(reward_file)
        return env

    def run_child(self, env: dict[str, str]) -> int | None:
        """The child's exit status; None when it timed out (it is killed)."""
        self.child = subprocess.Popen(self.command, env=env)
        try:
            return self.child.wait(timeout=self.args.timeout)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
            return None
        finally:
            self.child = None

    def reward(
        self, ep: Episode, code: int, reward_file: Path | None
    ) -> tuple[float, dict[str, float]]:
        if self.args.reward_from_exit_code:
            return (1.0 if code == 0 else 0.0), {}
        if self.args.reward_cmd:
            env = {
                **os.environ,
                "SWARMRL_EPISODE_ID": ep.id,
                "SWARMRL_TASK_ID": self.args.task_id,
                "SWARMRL_EXIT_CODE": str(code),
            }
            done = subprocess.run(
                self.args.reward_cmd,
                shell=True,
                env=env,
                capture_output=True,
                text=True,
                timeout=self.args.timeout,
                check=False,
            )
            if done.returncode != 0:
                raise ValueError(
                    f"--reward-cmd exited {done.returncode}: {done.stderr.strip()[-200:]}"
                )
            lines = [line for line in done.stdout.splitlines() if line.strip()]
            return _parse_reward(lines[-1] if lines else "", "--reward-cmd output")
        assert reward_file is not None
        if not reward_file.exists():
            raise ValueError(f"the agent wrote no reward to {reward_file}")
        return _parse_reward(reward_file.read_text(), str(reward_file))

    def play(self, client: SwarmClient, index: int, tmp: Path) -> Outcome:
        labels = dict(item.partition("=")[::2] for item in self.args.label)
        ep = client.start_episode(
            self.args.task_id,
            group_id=self.args.group_id,
            agent_version=self.args.agent_version,
            models=self.args.model,
            labels=labels,
        )
        _say(f"episode {ep.id} started ({index + 1}/{self.args.episodes})")
        reward_file = None
        if not (self.args.reward_from_exit_code or self.args.reward_cmd):
            reward_file = self.args.reward_file or tmp / f"reward-{index}"
            reward_file.unlink(missing_ok=True)
        code: int | None = None
        try:
            code = self.run_child(self.child_env(ep, index, reward_file))
            if self.interrupted:
                raise RuntimeError("interrupted")
            if code is None:
                raise RuntimeError(f"the agent ran longer than {self.args.timeout}s")
            if code != 0 and not self.args.reward_from_exit_code:
                raise RuntimeError(f"the agent failed (exit status {code})")
            value, model_rewards = self.reward(ep, code, reward_file)
        except (RuntimeError, ValueError, OSError, subprocess.SubprocessError) as err:
            ep.abort(str(err))
            _say(f"episode {ep.id} aborted: {err}")
            return Outcome(ep.id, None, str(err), code)
        except BaseException:
            ep.abort("the wrapper failed")
            raise
        ep.end(value, model_rewards=model_rewards or None)
        per_model = "".join(f", {m}: {r:g}" for m, r in sorted(model_rewards.items()))
        _say(f"episode {ep.id} ended with reward {value:g}{per_model}")
        return Outcome(ep.id, value, exit_code=code)

    def forward_signal(self, signum: int, frame: object) -> None:
        """Ctrl-C / SIGTERM: pass it to the agent; its episode is then aborted."""
        self.interrupted = True
        if self.child is not None and self.child.poll() is None:
            self.child.send_signal(signum)


def _say(text: str) -> None:
    print(f"swarmrl run: {text}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``swarmrl run``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("give the agent command after --")
    if args.episodes < 1:
        parser.error("--episodes must be at least 1")
    runner = Runner(args, command)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, runner.forward_signal)
    config = ClientConfig(target=args.target, api_key=args.api_key or None, tls=args.tls)
    outcomes: list[Outcome] = []
    try:
        with SwarmClient(config=config) as client, tempfile.TemporaryDirectory() as tmp:
            for index in range(args.episodes):
                outcomes.append(runner.play(client, index, Path(tmp)))
                if runner.interrupted:
                    return 130
    except SwarmError as err:
        _say(f"{args.target}: {err}")
        return 2
    return 0 if all(o.reward is not None for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
