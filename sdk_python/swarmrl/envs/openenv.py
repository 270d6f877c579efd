"""OpenEnv environments as swarmrl environments: ``openenv:SPEC``.

`OpenEnv <https://pypi.org/project/openenv/>`_ environments are servers with ``reset``,
``step`` and ``state``, reached over a WebSocket (one socket = one session = one
environment instance); tool environments (``MCPEnvironment``) expose MCP tools through
``ListToolsAction`` / ``CallToolAction`` steps. ``SPEC`` is either

- ``http://HOST:PORT``: a running OpenEnv server (any transport OpenEnv's client takes);
- ``package.module:Class`` or ``path/to/file.py:Class``: an OpenEnv ``Environment``
  class (or a factory of one, with ``action_cls`` / ``observation_cls``), which the
  adapter serves itself with OpenEnv's own ``create_app`` under uvicorn on 127.0.0.1
  (a free port, in a thread of this process; no container).

Either way every rollout opens its own session with OpenEnv's ``GenericEnvClient``:

1. ``reset`` with the item's seed (and the swarmrl episode id as OpenEnv's
   ``episode_id``, so the environment's own logs name the episode);
2. a loop of model turns, at most ``max_steps``: the observation becomes a chat message
   (`Hooks.render`), the model replies through the rollout's episode, the reply becomes
   an action (`Hooks.action`) and is stepped, until an observation says ``done``;
3. the reward: ``reward="sum"`` (default) of the step rewards (None counts 0),
   ``"last"`` (the last step's), or ``"state:KEY"`` (``state()[KEY]`` after the loop, for
   environments that keep the score in their state).

A reply the server rejects as an invalid action (its ``VALIDATION_ERROR``) costs the turn:
the model is told the error and plays on (counted in ``invalid_actions``); an
environment that fails inside ``step`` fails the rollout (aborted, retried fresh).

**Tool environments.** Tools are listed once (``ListToolsAction``) and passed to every
chat call as OpenAI function tools; each tool call of a reply is stepped as a
``CallToolAction`` with the call's arguments and its result goes back as a ``tool``
message. A reply without tool calls ends the rollout. ``MCPEnvironment`` leaves
``reward`` and ``done`` unset on tool results, so the reward must come from somewhere
the environment's author chose: a tool whose result sets them (an author overriding
``step`` for a ``submit`` tool, as OpenEnv's tool environments do), ``end_tool=NAME``
(calling that tool ends the rollout; its reward is the observation's, else its result
when that is a number), or ``reward="state:KEY"``. ``tool_choice="required"`` forces a
tool call each turn (the OpenAI shim's ``tool_choice``; the call then goes through the
rollout's OpenAI client instead of the SDK's chat, which has no such option).

**Cut calls.** A reply cut by the token limit (``finish_reason`` "length") that carries
tool calls ends the rollout as truncated: its calls are neither stepped nor sent back
(their arguments are cut mid-JSON, and the swarm server refuses such a message). The
cut is the policy's doing, so the rollout keeps the reward the environment gave it so
far, trains, and says so: ``ended_by`` "length", metric ``truncated`` 1.

**Items.** Without hooks that give items, a split is a range of seeds: ``train``,
``val``, ``test`` are counts (from seed 0, 1_000_000 and 2_000_000) or ``[start, stop]``
ranges (defaults 10_000, 20, 20). The held-out check (val and test never trained)
compares each item's content, and an OpenEnv server shows none before ``reset``, so
``held_out`` says what an item's content is:

- ``"seed"`` (default): the seed. An environment whose ``reset(seed)`` maps several
  seeds to one problem leaks val and test into train unseen, so the adapter says so,
  loudly, when it lists items (a warning, and ``held_out`` in `describe`, hence the card).
  Most games hide their problem in the state (a secret word, hidden temperatures), so
  the reset observation alone cannot tell their problems apart.
- ``"observation"``: the reset observation (its fields and metadata, canonical JSON),
  for environments whose observation states the problem (a question, a puzzle): val
  and test are reset once each when listed, train items one by one as they are drawn
  (a stream, not cycled). Equal observations are the same problem: a train seed that
  resets to a val or test item's problem is skipped, as are duplicates across val/test
  refused.

Other arguments: `OpenEnv`; hooks (``hooks=module:attr``, a `Hooks` subclass or
instance): `Hooks`, per method.

The OpenEnv version is checked at load (`OPENENV_VERSION`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import structlog

from swarmrl.envs._api import Environment, Item, Outcome, Rollout, Split
from swarmrl.envs._load import _python_object
from swarmrl.envs._openenv_hooks import Hooks, Step, step_of
from swarmrl.envs._openenv_server import LocalServer, ServerError, get_json
from swarmrl.envs._versions import check_version

__all__ = ["OPENENV_VERSION", "Hooks", "OpenEnv", "Step", "load"]

OPENENV_VERSION = "0.10.0"
"""The OpenEnv release the adapter was built and tested for (checked at load)."""
_log = structlog.get_logger("swarmrl.envs")

_SEED_BASE = {"train": 0, "val": 1_000_000, "test": 2_000_000}
_DEFAULT_COUNTS = {"train": 10_000, "val": 20, "test": 20}


def load(spec: str, **args: Any) -> OpenEnv:
    """``openenv:SPEC`` with ``--env-arg`` values: see the module docstring and `OpenEnv`."""
    return OpenEnv(spec, **args)


def _run_apart(coro: Any) -> Any:
    """Runs `coro` to its end on an event loop of its own, in a thread of its own: the
    caller may be a synchronous method called on (or off) a running loop."""
    result: list[Any] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as exc:  # re-raised in the caller's thread
            error.append(exc)

    thread = threading.Thread(target=run, name="openenv-items")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


class OpenEnv(Environment):
    """An OpenEnv environment (see the module docstring for ``spec`` and the loop)."""

    def __init__(
        self,
        spec: str,
        *,
        hooks: str | Hooks | type[Hooks] | None = None,
        env_args: Mapping[str, Any] | None = None,
        action_cls: str | None = None,
        observation_cls: str | None = None,
        name: str = "",
        max_steps: int = 16,
        reward: str = "sum",
        success_at: float | None = None,
        train: int | list[int] | None = None,
        val: int | list[int] | None = None,
        test: int | list[int] | None = None,
        tools: bool | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        end_tool: str | None = None,
        max_sessions: int | None = None,
        message_timeout_s: float = 60.0,
        capacity_wait_s: float = 120.0,
        held_out: str = "seed",
    ) -> None:
        """
        Args:
            spec: ``http://HOST:PORT`` of a running server, or ``module:Class`` /
                ``file.py:Class`` of an OpenEnv Environment to serve here.
            hooks: A `Hooks` subclass or instance, or ``module:attr`` naming one.
            env_args: Keyword arguments of the environment class (served here only).
            action_cls, observation_cls: ``module:Class`` of the served environment's
                Action and Observation, when its generic parameters do not say.
            name: The environment's name in records (default: the class name or "openenv").
            max_steps: Model turns per rollout; a rollout that reaches it unfinished is
                truncated (metric ``truncated``) and keeps the reward it earned.
            reward: ``"sum"`` of step rewards, ``"last"``, or ``"state:KEY"``.
            success_at: A rollout succeeds when its reward is at least this (None:
                success undefined, evaluation reports the mean reward).
            train, val, test: Seeds of each split: a count or ``[start, stop]``.
            tools: Whether it is a tool (MCP) environment; None: an ``MCPEnvironment``
                class, or a server whose action schema has ``tool_name``.
            tool_choice: The OpenAI ``tool_choice`` of tool environments ("required",
                "auto", or ``{"type": "function", "function": {"name": ...}}``); None: not
                sent.
            end_tool: A tool whose call ends the rollout.
            max_sessions: Sessions open at once (rollouts beyond it wait). Served here:
                the server's ``max_concurrent_envs``, default 64 for an environment with
                ``SUPPORTS_CONCURRENT_SESSIONS`` and 1 otherwise; a remote server: no
                limit here (a server at capacity is retried for ``capacity_wait_s``).
            message_timeout_s: OpenEnv client's wait for each answer of the server.
            capacity_wait_s: How long a session refused with ``CAPACITY_REACHED`` is retried.
            held_out: What the held-out check compares: ``"seed"`` or the reset
                ``"observation"`` (module docstring, Items).
        """
        if reward not in ("sum", "last") and not reward.startswith("state:"):
            raise ValueError(f"reward={reward!r}: expected sum, last or state:KEY")
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        if held_out not in ("seed", "observation"):
            raise ValueError(f"held_out={held_out!r}: expected seed or observation")
        check_version("openenv", OPENENV_VERSION, "swarmrl.envs.openenv")
        self.held_out = held_out
        self._warned_seeds = False
        self._serve_lock = threading.Lock()
        self.spec = spec
        self.remote = spec.startswith(("http://", "https://", "ws://", "wss://"))
        self._env_obj: Any = None if self.remote else _python_object(spec)
        self._env_args = dict(env_args or {})
        if self.remote and (self._env_args or action_cls or observation_cls):
            raise ValueError("env_args, action_cls and observation_cls are for an environment "
                             "class served here, not a running server")
        self._classes = (action_cls, observation_cls)
        self.name = name or ("openenv" if self.remote else
                             getattr(self._env_obj, "__name__", "openenv"))
        self.hooks = self._make_hooks(hooks)
        self.max_steps = max_steps
        self.reward_mode = reward
        self.success_at = success_at
        self._splits = {"train": train, "val": val, "test": test}
        self._tools_flag = tools
        self.tool_choice = tool_choice
        self.end_tool = end_tool
        self.max_sessions = max_sessions
        self.message_timeout_s = message_timeout_s
        self.capacity_wait_s = capacity_wait_s
        self.url = spec if self.remote else ""
        self.is_tool_env = False
        self._server: LocalServer | None = None
        self._sessions: asyncio.Semaphore | None = None
        self._started = False
        self._start_lock = asyncio.Lock()

    @staticmethod
    def _make_hooks(hooks: str | Hooks | type[Hooks] | None) -> Hooks:
        obj: Any = _python_object(hooks) if isinstance(hooks, str) else hooks
        if obj is None:
            return Hooks()
        if isinstance(obj, type) and issubclass(obj, Hooks):
            return obj()
        if isinstance(obj, Hooks):
            return obj
        raise TypeError(f"hooks={hooks!r} is not a swarmrl.envs.openenv.Hooks subclass")

    def describe(self) -> dict[str, Any]:
        return {"spec": self.spec, "hooks": type(self.hooks).__qualname__,
                "env_args": self._env_args, "max_steps": self.max_steps,
                "reward": self.reward_mode, "success_at": self.success_at,
                "splits": self._splits, "tool_choice": self.tool_choice,
                "end_tool": self.end_tool, "max_sessions": self.max_sessions,
                "held_out": self.held_out}

    # -- items ----------------------------------------------------------------------------

    def items(self, split: Split) -> Iterable[Item]:
        given = self.hooks.items(split)
        if given is not None:
            return given
        spec = self._splits[split]
        if spec is None:
            spec = _DEFAULT_COUNTS[split]
        if isinstance(spec, int):
            start, stop = _SEED_BASE[split], _SEED_BASE[split] + spec
        elif isinstance(spec, (list, tuple)) and len(spec) == 2:
            start, stop = int(spec[0]), int(spec[1])
        else:
            raise ValueError(f"{split}={spec!r}: expected a count or [start, stop]")
        seeds = range(start, stop)
        if self.held_out == "observation":
            listed = (self._observed_item(split, seed) for seed in seeds)
            return listed if split == "train" else list(listed)
        if not self._warned_seeds:
            self._warned_seeds = True
            _log.warning("openenv_held_out_by_seed", env=self.name, detail=(
                "the held-out check compares seeds only: an environment whose reset maps "
                "several seeds to one problem leaks val/test into train unseen; pass "
                "--env-arg held_out=observation if its reset observation states the problem"))
        return [Item(f"{split}-{seed}", {"seed": seed}, task=self.name,
                     content=f"{self.name} seed {seed}") for seed in seeds]

    def _observed_item(self, split: Split, seed: int) -> Item:
        """The seed's item, its content the reset observation (a session of its own,
        run on a loop of its own: `items` is synchronous)."""
        item = Item(f"{split}-{seed}", {"seed": seed}, task=self.name)
        args = self.hooks.reset_args(item)

        async def observe() -> Step:
            client_cls = importlib.import_module("openenv.core.generic_client").GenericEnvClient
            client = client_cls(base_url=self.url, message_timeout_s=self.message_timeout_s)
            try:
                return await self._reset(client, args)
            finally:
                await client.close()

        self._ensure_served()

        step = _run_apart(observe())
        content = json.dumps({"observation": step.observation, "metadata": step.metadata},
                             sort_keys=True, separators=(",", ":"), default=str)
        return Item(item.id, item.data, task=self.name, content=f"{self.name} {content}")

    # -- the server and its sessions ------------------------------------------------------

    async def setup(self) -> None:  # also done by the first rollout, if not called
        await self._ensure_started()
    async def _ensure_started(self) -> None:
        async with self._start_lock:
            if self._started:
                return
            await asyncio.to_thread(self._ensure_served)
            self._sessions = asyncio.Semaphore(self.max_sessions) if self.max_sessions else None
            schema = await asyncio.to_thread(get_json, self.url, "/schema")
            self.hooks.action_schema = dict(schema.get("action") or {})
            props = self.hooks.action_schema.get("properties") or {}
            self.is_tool_env = (self._tools_flag if self._tools_flag is not None
                                else "tool_name" in props)
            self.hooks.tools = await self._list_tools() if self.is_tool_env else []
            self._started = True

    def _ensure_served(self) -> None:
        """Serves the environment class here, once (from any thread)."""
        with self._serve_lock:
            if self.remote or self._server is not None:
                return
            self._serve()

    def _serve(self) -> None:
        action, observation = (_python_object(c) if c else None for c in self._classes)
        self._server, self.max_sessions, is_mcp = LocalServer.serve(
            self._env_obj, self._env_args, (action, observation), self.name, self.max_sessions)
        self._tools_flag = is_mcp if self._tools_flag is None else self._tools_flag
        self.url = self._server.start()

    @contextlib.asynccontextmanager
    async def _session(self) -> AsyncIterator[Any]:
        """One OpenEnv session (one WebSocket, one environment instance), held within
        `max_sessions`; a server at capacity is retried until `capacity_wait_s`."""
        client_cls = importlib.import_module("openenv.core.generic_client").GenericEnvClient
        async with self._sessions or contextlib.nullcontext():
            client = client_cls(base_url=self.url, message_timeout_s=self.message_timeout_s)
            try:
                yield client
            finally:
                await asyncio.shield(client.close())

    async def _call(self, coro: Any) -> Step:
        try:
            return step_of(await coro)
        except RuntimeError as exc:
            if str(exc).startswith("Server error:"):
                raise ServerError(exc) from exc
            raise

    async def _reset(self, client: Any, args: Mapping[str, Any]) -> Step:
        deadline = time.monotonic() + self.capacity_wait_s
        delay = 0.05
        while True:
            try:
                return await self._call(client.reset(**args))
            except ServerError as exc:
                if exc.code != "CAPACITY_REACHED" or time.monotonic() > deadline:
                    raise
            await client.close()  # the refused socket; the next reset opens a new one
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _list_tools(self) -> list[dict[str, Any]]:
        """The MCP tools as OpenAI function tools (listed once, on a session of its own)."""
        async with self._session() as client:
            await self._reset(client, {})
            listed = await self._call(client.step({"type": "list_tools"}))
        return [{"type": "function", "function": {
            "name": t["name"], "description": t.get("description") or "",
            "parameters": t.get("input_schema") or {"type": "object", "properties": {}}}}
            for t in listed.observation.get("tools") or []]

    async def close(self) -> None:
        if self._server is not None:
            await asyncio.to_thread(self._server.stop)
            self._server = None
        self._started = False

    # -- one rollout ----------------------------------------------------------------------

    async def play(self, rollout: Rollout) -> Outcome:
        await self._ensure_started()
        args = {"episode_id": rollout.episode.id, **self.hooks.reset_args(rollout.item)}
        counts = {"turns": 0, "env_steps": 0, "invalid_actions": 0, "tool_calls": 0}
        async with self._session() as client:
            first = await self._reset(client, args)
            steps = [first]
            messages = list(self.hooks.start(first))
            ended_by = "done" if first.done else "max_steps"
            while not steps[-1].done and counts["turns"] < self.max_steps:
                message, text, finish = await self._chat(rollout, messages)
                counts["turns"] += 1
                if finish == "length" and message.get("tool_calls"):
                    ended_by = "length"  # a call cut mid-arguments: the policy's doing
                    break
                messages.append(message)
                if self.is_tool_env:
                    ended = await self._tool_turn(client, message, messages, steps, counts)
                else:
                    ended = await self._text_turn(client, text, messages, steps, counts)
                if ended:
                    ended_by = ended
                    break
            state: dict[str, Any] = {}
            if self.reward_mode.startswith("state:"):
                state = dict(await client.state() or {})
        played = steps[1:]
        if self.reward_mode == "sum":
            reward = sum(s.reward or 0.0 for s in played)
        elif self.reward_mode == "last":
            reward = (played[-1].reward or 0.0) if played else 0.0
        else:
            reward = float(state.get(self.reward_mode.removeprefix("state:")) or 0.0)
        if ended_by == "max_steps" and steps[-1].done:
            ended_by = "done"
        metrics = {k: float(v) for k, v in counts.items()}
        metrics["truncated"] = float(ended_by in ("max_steps", "length"))
        success = None if self.success_at is None else reward >= self.success_at
        outcome = Outcome(reward=float(reward), success=success, metrics=metrics,
                          info={"reset": {k: v for k, v in args.items() if k != "episode_id"},
                                "ended_by": ended_by})
        return self.hooks.outcome(outcome, steps)

    async def _chat(self, rollout: Rollout, messages: list[dict[str, Any]]
                    ) -> tuple[dict[str, Any], str, str]:
        """One model call through the rollout's episode: the SDK's chat, or the episode's
        OpenAI client when a ``tool_choice`` must be sent. Returns the reply as a
        message, its text and its finish reason."""
        tools = self.hooks.tools or None
        if self.tool_choice is None or not tools:
            c = await rollout.chat(messages, tools=tools)
            return c.message, c.text, c.finish_reason
        client: Any = rollout.openai(max_retries=0)  # messages and tools are plain dicts
        r = await client.chat.completions.create(
            model=rollout.model, messages=messages, tools=tools, tool_choice=self.tool_choice,
            **rollout.openai_sampling())
        reply = r.choices[0].message
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or ""}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in reply.tool_calls if c.type == "function"]
        return message, reply.content or "", r.choices[0].finish_reason or ""

    async def _text_turn(self, client: Any, text: str, messages: list[dict[str, Any]],
                         steps: list[Step], counts: dict[str, int]) -> str:
        action = self.hooks.action(text, steps[-1])
        if action is None:
            return "reply"
        try:
            step = await self._call(client.step(action))
        except ServerError as exc:
            if exc.code != "VALIDATION_ERROR":
                raise
            counts["invalid_actions"] += 1
            messages.append({"role": "user", "content": f"Invalid action: {exc}"})
            return ""
        counts["env_steps"] += 1
        steps.append(step)
        if not step.done:
            messages.append({"role": "user", "content": self.hooks.render(step)})
        return ""

    async def _tool_turn(self, client: Any, message: Mapping[str, Any],
                         messages: list[dict[str, Any]], steps: list[Step],
                         counts: dict[str, int]) -> str:
        calls = message.get("tool_calls") or []
        if not calls:
            return "reply"
        for call in calls:
            name = call["function"]["name"]
            try:
                arguments = json.loads(call["function"].get("arguments") or "{}")
            except json.JSONDecodeError:
                arguments = None
            if not isinstance(arguments, dict):
                counts["invalid_actions"] += 1
                messages.append({"role": "tool", "tool_call_id": call.get("id", ""),
                                 "content": "error: the arguments are not a JSON object"})
                continue
            step = await self._call(client.step(
                {"type": "call_tool", "tool_name": name, "arguments": arguments}))
            counts["env_steps"] += 1
            counts["tool_calls"] += 1
            if name == self.end_tool and step.reward is None:
                result = step.observation.get("result")
                data = result.get("data") if isinstance(result, dict) else result
                if isinstance(data, (int, float)):
                    step = Step(step.observation, float(data), step.done, step.metadata)
            steps.append(step)
            if step.done or name == self.end_tool:
                return "done" if step.done else "end_tool"  # later calls of the reply: unplayed
            messages.append({"role": "tool", "tool_call_id": call.get("id", ""),
                             "content": self.hooks.tool_result(step)})
        return ""
