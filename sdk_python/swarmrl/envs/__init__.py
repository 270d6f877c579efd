"""Bring your environment: the environment API, the runner, evaluation.

An `Environment` gives items in named splits (train, val, test) and plays one rollout
of an item against a swarmrl episode, returning an `Outcome`. A `Runner` plays GRPO
groups of training rollouts and evaluates splits; ``swarmrl train ENV`` and
``swarmrl eval ENV`` do the same from the command line.

.. code-block:: python

    from swarmrl.envs import Environment, Item, Outcome

    class Add(Environment):
        name = "add"

        def items(self, split):
            ...  # Item(id, data, task=...) for the split

        async def play(self, rollout):
            c = await rollout.chat([{"role": "user", "content": rollout.item.data["q"]}])
            return Outcome(reward=float(c.text.strip() == rollout.item.data["a"]))

``play`` raises `PolicyError` when the model's output is unusable (the rollout is then
trained with the error's reward); anything else it raises is the environment's failure,
retried as a fresh episode. Errors that would recur on every rollout stop the run with
`RunStopped`.

Adapters for the ecosystem's environments live in `swarmrl.envs.verifiers` and
`swarmrl.envs.openenv` (each imports its package only when used).
"""

from swarmrl.envs._api import SPLITS, Environment, Item, Outcome, Rollout, Split
from swarmrl.envs._failures import PolicyError, RunStopped
from swarmrl.envs._load import load_environment, parse_env_args
from swarmrl.envs._report import EvalReport, RolloutRecord
from swarmrl.envs._roles import RoleSpec, parse_roles
from swarmrl.envs._runner import Runner, RunnerConfig, TrainReport
from swarmrl.envs._stats import bootstrap_mean, wilson

__all__ = [
    "SPLITS",
    "Environment",
    "EvalReport",
    "Item",
    "Outcome",
    "PolicyError",
    "RoleSpec",
    "Rollout",
    "RolloutRecord",
    "RunStopped",
    "Runner",
    "RunnerConfig",
    "Split",
    "TrainReport",
    "bootstrap_mean",
    "load_environment",
    "parse_env_args",
    "parse_roles",
    "wilson",
]
