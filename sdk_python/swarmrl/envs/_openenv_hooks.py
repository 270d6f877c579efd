"""How OpenEnv observations become chat messages and replies become actions, for
`swarmrl.envs.openenv`: `Step` (one answer of the environment server) and `Hooks` (the
defaults, overridable per environment)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from swarmrl.envs._api import Item, Outcome, Split

__all__ = ["Hooks", "Step", "action_fields", "step_of"]

_TEXT_KEYS = ("prompt", "text", "message", "feedback", "output", "content", "observation")


@dataclass(frozen=True)
class Step:
    """One answer of the environment server: to ``reset``, or to a ``step``."""

    observation: dict[str, Any]
    """The observation's own fields (the environment's Observation class, as JSON)."""
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


class Hooks:
    """How observations become chat messages and replies become actions.

    Subclass it and override what your environment needs; name it with
    ``--env-arg hooks=package.module:attr`` (a subclass, or an instance). `action_schema`
    (the server's action JSON schema) and `tools` (OpenAI tools, for tool environments)
    are set before the first rollout.
    """

    action_schema: dict[str, Any]
    tools: list[dict[str, Any]]

    def items(self, split: Split) -> Iterable[Item] | None:
        """The split's items; None (default): seeds from the ``train``/``val``/``test``
        arguments. Each item's `data` goes to `reset_args`."""
        return None

    def reset_args(self, item: Item) -> dict[str, Any]:
        """Keyword arguments of ``reset`` (default: the item's data, e.g. ``seed``)."""
        return dict(item.data)

    def start(self, step: Step) -> list[dict[str, Any]]:
        """The conversation's opening messages for the reset observation `step`. Default:
        `system` (when there is one), then `render` of the observation as the user's."""
        system = self.system()
        return ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": self.render(step)}]

    def system(self) -> str | None:
        """The system message (default: none, or the JSON action format when an action
        has more than one field)."""
        fields = action_fields(self.action_schema)
        if self.tools or len(fields) == 1:
            return None
        return ("Reply with one JSON object, an action of this schema:\n"
                + json.dumps(self.action_schema, sort_keys=True))

    def render(self, step: Step) -> str:
        """An observation as the user message's text. Default: its only string field, or
        the first of prompt/text/message/feedback/output/content/observation, else the
        fields (without metadata; metadata when there are none) as JSON."""
        fields = {k: v for k, v in step.observation.items() if k != "metadata"}
        fields = fields or step.metadata or step.observation.get("metadata") or {}
        strings = [v for v in fields.values() if isinstance(v, str)]
        if len(strings) == 1:
            return strings[0]
        for key in _TEXT_KEYS:
            if isinstance(fields.get(key), str):
                return str(fields[key])
        return json.dumps(fields, sort_keys=True, default=str)

    def action(self, reply: str, step: Step) -> dict[str, Any] | None:
        """The model's reply (text) as an action for ``step``; None ends the rollout.
        Default: an action with one field gets the stripped reply; otherwise the reply's
        first JSON object (an unparsable reply is sent as-is, so the server's
        validation error tells the model what was wrong)."""
        fields = action_fields(self.action_schema)
        if len(fields) == 1:
            return {fields[0]: reply.strip()}
        start, end = reply.find("{"), reply.rfind("}")
        with contextlib.suppress(ValueError):
            parsed = json.loads(reply[start:end + 1]) if 0 <= start < end else None
            if isinstance(parsed, dict):
                return parsed
        return {"reply": reply}

    def tool_result(self, step: Step) -> str:
        """A tool call's observation as the ``tool`` message's content. Default: the MCP
        result's text parts, its data, or the error."""
        obs = step.observation
        if obs.get("error"):
            error = obs["error"]
            return f"error: {error.get('message', error) if isinstance(error, dict) else error}"
        result = obs.get("result")
        if isinstance(result, dict):
            texts = [c.get("text", "") for c in result.get("content") or []
                     if isinstance(c, dict) and c.get("type") == "text"]
            if texts:
                return "\n".join(texts)
            if result.get("data") is not None:
                return _text(result["data"])
        return _text(result)

    def outcome(self, outcome: Outcome, steps: list[Step]) -> Outcome:
        """The rollout's outcome from the default one (reward as configured, success from
        ``success_at``, metrics) and every step the rollout made (reset first)."""
        return outcome

def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def action_fields(schema: Mapping[str, Any]) -> list[str]:
    return [k for k in (schema.get("properties") or {}) if k != "metadata"]


def step_of(result: Any) -> Step:
    """OpenEnv's ``StepResult`` (from ``GenericEnvClient``) as a `Step`."""
    reward = result.reward
    return Step(observation=dict(result.observation or {}),
                reward=float(reward) if reward is not None else None,
                done=bool(result.done), metadata=dict(result.metadata or {}))
