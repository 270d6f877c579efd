"""What `swarmrl.envs.verifiers` keeps and changes in a verifiers env config (its module
docstring lists each change and why): the config built from ``verifiers:ID`` and its
arguments, then adapted: retries off, the cut-call stop plugged, runtimes kept (remote
ones made local only under ``sandbox=local``), code-executing harnesses kept off the
host unless asked, harnesses kept (``null`` run in process only under
``harness=inprocess``), untrained roles pointed at their own endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["CUT_STOP", "INPROCESS_HARNESS", "UNTRAINED_KEY_VAR", "adapted", "config_data"]

CUT_STOP = "swarmrl_cut_tool_call"
"""The name of the plugged ``@stop`` that ends a rollout at a tool call cut by the token
limit (`swarmrl.envs._verifiers_stops`); the trace's ``stop_condition`` when it fires."""
INPROCESS_HARNESS = "null"
"""The one harness ``harness=inprocess`` replaces: its program is the in-process one's."""
UNTRAINED_KEY_VAR = "SWARMRL_VERIFIERS_UNTRAINED_API_KEY"
"""The variable the untrained roles' client reads its key from (verifiers reads keys
from variables)."""


def config_data(id_or_config: str | Mapping[str, Any], args: Mapping[str, Any]
                ) -> dict[str, Any]:
    """The env config as data: ``ID`` / ``ENV+TASKSET`` or a whole config, with the dotted
    config fields of `args` set (``env``: a whole block, merged)."""
    if isinstance(id_or_config, Mapping):
        data: dict[str, Any] = json.loads(json.dumps(dict(id_or_config)))
    else:
        env_id, plus, taskset_id = id_or_config.rpartition("+")
        data = {"taskset": {"id": taskset_id}}
        if plus:
            data["id"] = env_id
    for key, value in args.items():
        if key == "env":
            _merge(data, dict(value))
            continue
        node = data
        *head, last = key.split(".")
        for part in head:
            node = node.setdefault(part, {})
        node[last] = value
    return data


def _merge(into: dict[str, Any], other: Mapping[str, Any]) -> None:
    for key, value in other.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def adapted(config: Any, loaders: Any, *, sandbox: str | None, harness_mode: str,
            untrained: Iterable[str] = (),
            untrained_endpoint: tuple[str | None, str | None] = (None, None)) -> Any:
    """`config` (a resolved verifiers env config) with the adapter's changes, revalidated
    by verifiers' own ``resolve_env_config``; raises ValueError for what it refuses."""
    from verifiers.v1.configs.agent import agent_config_fields
    from verifiers.v1.configs.env import default_agent_harness
    from verifiers.v1.runtimes import runtime_is_local

    from swarmrl.envs._verifiers_chat import HARNESS_ID

    env_id = config.env_id
    data = config.model_dump(mode="json")
    data["retries"] = {"max_retries": 0, "rules": []}
    task = data["taskset"].setdefault("task", {})
    task.setdefault("stops", {})[CUT_STOP] = {
        "fn": "swarmrl.envs._verifiers_stops:swarmrl_cut_tool_call"}
    default = default_agent_harness(config.taskset.id)
    for name, spec in agent_config_fields(config).items():
        role = data[name]
        role["retries"] = {"max_retries": 0, "rules": []}
        if not runtime_is_local(spec.runtime):
            if sandbox == "local":
                role["runtime"] = {"type": "subprocess"}
            else:
                _check_remote(env_id, name, spec.runtime)
        harness = spec.harness if spec.harness is not None else default
        on_host = role["runtime"]["type"] == "subprocess"
        if on_host and sandbox != "local" and loaders.harness_class(harness.id).EXECUTES_CODE:
            raise ValueError(
                f"verifiers:{env_id}: role {name!r} plays harness {harness.id!r}, which "
                "executes the model's code, in the subprocess runtime: the model's commands "
                "would run on this host. Pass --env-arg sandbox=local if that is meant, or "
                f"give the role a container runtime (--env-arg {name}.runtime.type=docker)")
        if harness_mode == "inprocess" and harness.id != HARNESS_ID:
            if harness.id != INPROCESS_HARNESS:
                raise ValueError(
                    f"verifiers:{env_id}: harness=inprocess replaces only the "
                    f"{INPROCESS_HARNESS!r} harness (its chat program, run here), but role "
                    f"{name!r} plays {harness.id!r}; drop harness=inprocess to keep it")
            role["harness"] = {"id": HARNESS_ID, "tool_timeout": harness.tool_timeout,
                               "env": harness.env, "disabled_tools": harness.disabled_tools}
        if name in untrained:
            base_url, model = untrained_endpoint
            role["client"] = {"type": "eval", "base_url": base_url,
                              "api_key_var": UNTRAINED_KEY_VAR}
            if model:
                role["model"] = model
    return loaders.resolve_env_config(data)


def _check_remote(env_id: str, role: str, runtime_config: Any) -> None:
    """Refuses a remote runtime verifiers cannot provision here (its own check, run when
    the runtime is made: prime's credentials, ...), naming ``sandbox=local``."""
    from verifiers.v1.runtimes import make_runtime

    try:
        runtime = make_runtime(runtime_config)
    except (Exception, SystemExit) as exc:  # prime's auth check exits
        raise ValueError(
            f"verifiers:{env_id}: role {role!r} runs in a remote {runtime_config.type} "
            f"sandbox, which cannot be provisioned here ({exc}). Pass --env-arg "
            "sandbox=local to play it in verifiers' subprocess runtime instead (a local "
            "working directory: the model's commands then run on this host)") from exc
    runtime.cleanup()
