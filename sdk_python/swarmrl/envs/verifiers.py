"""verifiers environments, trained unchanged: ``swarmrl train verifiers:ID``.

`load` builds a verifiers 0.4 (``verifiers.v1``) environment exactly as verifiers' own
loader does (``resolve_env_config`` then ``load_environment``) and wraps it in a swarmrl
`Environment`:

- **items**: the taskset's tasks, one `Item` each (its task data as ``Item.data``, its
  content, without the positional ``idx``, as ``Item.content``). A taskset whose config
  has a ``split`` field (``split_field``) is loaded once per split with that field set
  (``split_names`` maps train/val/test to its values). Any other taskset is split by a
  hash of each task's content: a task goes to test when the hash's fraction of 2**64 is
  below ``test_fraction``, else to val below ``test_fraction + val_fraction``, else to
  train; the same task lands in the same split on every machine and every run. An
  infinite taskset's val and test come from its first ``held_out_scan`` tasks.
- **play**: one rollout is one ``Env.run_episode(task, ModelContext(...))``, verifiers'
  own episode code, with the model context's client config pointed at the rollout's
  swarmrl episode, inside one ``Env.serving()`` held for the environment's life. The
  reward is the trained trace's ``Trace.reward``; success is its ``success`` metric
  when it records one (else None); the metrics are its metrics, rewards
  (``reward/NAME``), turns and calls.

What the adapter keeps and what it changes (each in `describe`):

- **Harnesses are kept** as the environment names them (verifiers' default is ``bash``:
  its chat program with the ``bash`` and ``edit`` tools, launched in the role's runtime
  as a ``uv`` script). Only the model endpoint changes: the role's client config points
  at the rollout's swarmrl episode (its own base URL, ``.../k/<key>/v1``).
  ``harness=inprocess`` (opt-in, for speed) runs the ``null`` harness's chat program in
  this process instead of a ``uv`` script per turn: the same program, no tools of its own;
  a role with any other harness is refused under it.
- **Runtimes are kept.** A remote sandbox (verifiers' default: prime) stays remote; one
  that cannot be provisioned here (no credentials) is refused at load. ``sandbox=local``
  turns every remote runtime into verifiers' ``subprocess`` runtime: a working
  directory on this host, not an isolation boundary. A harness that executes code
  (``EXECUTES_CODE``, as ``bash``) in a subprocess runtime runs the model's commands on
  the training host, so it is refused unless ``sandbox=local`` says that is meant.
- **Retries**: verifiers' per-agent and per-episode retries are forced to 0: a retried
  attempt reuses the rollout's model context, so the failed attempt's calls would stay
  in the trained episode. A failed rollout raises instead; swarmrl's runner aborts its
  episode and retries the item as a fresh episode. A retry that happens anyway (seen
  through ``on_discard``) fails the rollout.
- **A tool call cut by the token limit ends the rollout** (a plugged ``@stop``,
  `CUT_STOP`): the chat program would send the cut call back in the next turn's
  messages, which the swarm server refuses (its arguments are not JSON). The cut is the
  policy's doing, so the trace stops there, is scored by the task as verifiers scores
  any stopped trace, and trains; the outcome says ``truncated``.
- **Untrained roles** (agents an env marks ``trainable = False`` in ``Env.setup``, such
  as a simulated user or a judge, plus any named in ``untrained_roles``) are pointed at
  ``untrained_base_url`` (any OpenAI-compatible endpoint: a second swarm server that
  does not train, a vLLM, a hosted API) with ``untrained_model``; an env with such roles
  and no such URL is refused, since their calls would be recorded as policy tokens.

verifiers internals the adapter needs where verifiers 0.4 has no public API (the chat
program's functions, the interception server's client cache) are looked up loudly: a
missing one raises `VerifiersInternalError` instead of silently changing behaviour. The
verifiers version is checked at load (`VERIFIERS_VERSION`).

Failed episodes (``Episode.ok`` false, errors, an untrainable trace in the trained
episode, more than one trainable trace) raise, so the runner aborts them.

verifiers is imported only when `load` is called: it lives in its own venv
(``make verifiers-venv``), since it pins openai<3 and mcp==2.0.0.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from swarmrl.envs._api import SPLITS, Environment, Item, Outcome, Rollout, Split
from swarmrl.envs._verifiers_config import CUT_STOP, UNTRAINED_KEY_VAR, adapted, config_data
from swarmrl.envs._versions import check_version

# verifiers ships no type information usable under mypy --strict here (and is not installed
# in the main venv): its objects are typed `Any` at this boundary.

__all__ = ["CUT_STOP", "VERIFIERS_VERSION", "VerifiersEnvironment", "VerifiersInternalError",
           "load"]

VERIFIERS_VERSION = "0.4.0"
"""The verifiers release the adapter was built and tested for (checked at load)."""

ROUTE = "header"
"""How a rollout's calls name their episode under ``harness=inprocess``: "url" (the
episode's own base URL, ``.../k/<key>/v1``) or "header" (the server's stable base URL
and the episode header, forwarded by the in-process harness). "header" lets every
rollout share one client config, hence one upstream connection pool (verifiers keeps one
upstream client per distinct config until ``serving()`` ends). Kept harnesses send no
header, so they use "url", and the adapter closes each episode's upstream client after
its rollout instead."""

_NO_KEY_VAR = "SWARMRL_VERIFIERS_NO_KEY"
"""An unset variable: verifiers reads API keys from variables, and the episode's key
travels in its URL (or header), so the client sends ``Bearer EMPTY``."""


class VerifiersInternalError(RuntimeError):
    """A verifiers internal the adapter relies on is not where verifiers 0.4.0 has it."""


_OPTIONS = {
    "val_fraction": 0.1, "test_fraction": 0.1, "split_field": "split",
    "split_names": {"train": "train", "val": "val", "test": "test"},
    "held_out_scan": None, "harness": "keep", "sandbox": None, "untrained_roles": [],
    "untrained_base_url": None, "untrained_model": None, "untrained_api_key": None,
    "route": None,
}
"""swarmrl's own arguments (keys without a dot) and their defaults; every other argument
is a verifiers env config field (dotted: ``taskset.KEY``, ``agent.max_turns``, as
``--env.KEY`` on verifiers' CLI), or ``env`` (a whole config block)."""


def load(id_or_config: str | Mapping[str, Any], **args: Any) -> VerifiersEnvironment:
    """The verifiers environment `id_or_config` names, for swarmrl.

    `id_or_config` is a taskset id (an installed taskset package, as ``verifiers eval
    ID``), ``ENV+TASKSET`` (an env paired with a taskset, verifiers' ``env_id`` form), or
    a whole env config (the ``[env]`` block as a dict). `args` are swarmrl's options
    (`_OPTIONS`) and verifiers config fields (dotted keys), e.g.
    ``--env-arg taskset.size=50 --env-arg agent.max_turns=4 --env-arg val_fraction=0.2``;
    ``--env-arg sandbox=local`` plays remote runtimes in verifiers' subprocess runtime.
    """
    options: dict[str, Any] = {k: args.pop(k) if k in args else v
                               for k, v in _OPTIONS.items()}
    unknown = [k for k in args if "." not in k and k != "env"]
    if unknown:
        raise ValueError(f"verifiers: unknown argument(s) {', '.join(sorted(unknown))}: "
                         f"swarmrl's are {', '.join(sorted(_OPTIONS))}; verifiers config "
                         "fields are dotted (taskset.KEY, agent.KEY)")
    data = config_data(id_or_config, args)
    _venv_uv_on_path()
    return VerifiersEnvironment(data, **options)


def _venv_uv_on_path() -> None:
    """Puts this venv's ``bin`` on PATH when it holds a ``uv`` and PATH has none.

    verifiers runs a harness's chat program as a ``uv`` script, found on PATH; without
    one it installs one (``pip install --user``, else a download from astral.sh), which
    fails offline and writes to the user's home. ``make verifiers-venv`` installs uv into
    the venv verifiers runs in, which is on PATH only when the venv is activated."""
    venv_uv = Path(sys.executable).parent / "uv"
    if shutil.which("uv") is None and venv_uv.is_file():
        os.environ["PATH"] = os.pathsep.join([str(venv_uv.parent),
                                              os.environ.get("PATH", "")])


def _content(data: Mapping[str, Any]) -> str:
    """A task's content for the split check: its wire data without the position."""
    return json.dumps({k: v for k, v in data.items() if k != "idx" and v is not None},
                      sort_keys=True, separators=(",", ":"), default=str)


def hash_split(content: str, val_fraction: float, test_fraction: float) -> Split:
    """The split a task of this content goes to (see the module docstring)."""
    fraction = int(hashlib.sha256(content.encode()).hexdigest()[:16], 16) / 2**64
    if fraction < test_fraction:
        return "test"
    return "val" if fraction < test_fraction + val_fraction else "train"


def episode_url(rollout: Rollout) -> str:
    """The episode's own base URL, ``.../k/<key>/v1``: verifiers sends its client config's
    key from a variable, so with route "url" the key travels in the URL."""
    return rollout.base_url


class VerifiersEnvironment(Environment):
    """A verifiers ``Env`` as a swarmrl `Environment` (module docstring)."""

    def __init__(self, data: Mapping[str, Any], *, val_fraction: float = 0.1,
                 test_fraction: float = 0.1, split_field: str = "split",
                 split_names: Mapping[str, str] | None = None,
                 held_out_scan: int | None = None, harness: str = "keep",
                 sandbox: str | None = None, untrained_roles: Iterable[str] = (), untrained_base_url: str | None = None,
                 untrained_model: str | None = None, untrained_api_key: str | None = None,
                 route: str | None = None) -> None:
        check_version("verifiers", VERIFIERS_VERSION, "swarmrl.envs.verifiers")
        from verifiers.v1.utils import loaders

        from swarmrl.envs import _verifiers_chat

        if not (0 <= val_fraction and 0 <= test_fraction and val_fraction + test_fraction < 1):
            raise ValueError("verifiers: val_fraction and test_fraction must be >= 0 and "
                             "sum to less than 1")
        if harness not in ("inprocess", "keep"):
            raise ValueError(f"verifiers: harness={harness!r}: expected keep or inprocess")
        if sandbox not in (None, "local"):
            raise ValueError(f"verifiers: sandbox={sandbox!r}: expected local (or leave it "
                             "unset to keep the environment's runtimes)")
        self._sandbox = sandbox
        _verifiers_chat.register()
        if harness == "inprocess":
            _verifiers_chat.check_program()
        self._loaders = loaders
        self._fractions = (float(val_fraction), float(test_fraction))
        self._split_field = split_field
        names: dict[str, str] = {s: s for s in SPLITS}
        self._split_names = {**names, **dict(split_names or {})}
        self._held_out_scan = held_out_scan
        self._harness_mode = harness
        self._untrained_roles = set(untrained_roles)
        self._untrained = (untrained_base_url, untrained_model)
        if untrained_api_key is not None:
            os.environ[UNTRAINED_KEY_VAR] = str(untrained_api_key)
        self._route = route or (ROUTE if harness == "inprocess" else "url")
        if self._route not in ("url", "header"):
            raise ValueError(f"verifiers: route={self._route!r}: expected url or header")
        if self._route == "header" and harness != "inprocess":
            raise ValueError("verifiers: route=header needs harness=inprocess (only the "
                             "in-process program sends the episode header)")
        self._data = dict(data)
        self.config = self._adapted(loaders.resolve_env_config(self._data))
        self.env: Any = loaders.load_environment(self.config)
        self.name = f"verifiers:{self.config.env_id}"
        self._items: dict[Split, list[Item]] = {}
        self._tasks: dict[str, Any] = {}
        """Item digest -> the verifiers Task it was made from, for the listed (finite)
        splits only: an infinite train split's tasks are rebuilt from their items' data,
        so nothing grows with the number of rollouts."""
        self._stack: contextlib.AsyncExitStack | None = None
        self._pool: Any = None
        self._probed = False
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # not in a loop (the CLI): a refused env is refused at load
            asyncio.run(self._probe_untrained())

    # -- config -------------------------------------------------------------------------

    def _adapted(self, config: Any, untrained: Iterable[str] = ()) -> Any:
        """`config` with the changes the module docstring lists, revalidated."""
        return adapted(config, self._loaders, sandbox=self._sandbox,
                       harness_mode=self._harness_mode, untrained=untrained,
                       untrained_endpoint=self._untrained)

    async def _probe_untrained(self) -> None:
        """Asks the env which roles it marks untrainable (``Env.setup`` on stand-in agents),
        and points those (and `untrained_roles`) at the untrained endpoint."""
        from types import SimpleNamespace

        from verifiers.v1.agent import Agents
        from verifiers.v1.configs.agent import agent_config_fields

        roles = set(agent_config_fields(self.config))
        stand_ins = Agents(self.config, lambda name, spec: SimpleNamespace(
            name=name, config=spec, trainable=True))
        with contextlib.suppress(Exception):  # an env whose setup needs real agents
            await self.env.setup(stand_ins)  # is checked after each episode instead
        marked = {n for n in roles if not getattr(stand_ins, n).trainable}
        unknown = self._untrained_roles - roles
        if unknown:
            raise ValueError(f"{self.name}: untrained_roles {sorted(unknown)} are not roles "
                             f"of this env ({sorted(roles)})")
        untrained = marked | self._untrained_roles
        if untrained and not self._untrained[0]:
            raise ValueError(
                f"{self.name}: roles {sorted(untrained)} must not be trained, and their calls "
                "would land in the trained episode: give them an endpoint with --env-arg "
                "untrained_base_url=URL (and untrained_model=, untrained_api_key=)")
        if untrained:
            self.config = self._adapted(self.config, untrained)
            self.env = self._loaders.load_environment(self.config)
        self._untrained_roles = untrained
        self._probed = True

    def describe(self) -> dict[str, Any]:
        import verifiers

        from swarmrl.envs._verifiers_chat import program_source_digest

        return {"verifiers": verifiers.__version__, "config": self.config.model_dump(mode="json"),
                "requested_config": self._data, "fractions": {"val": self._fractions[0],
                                                              "test": self._fractions[1]},
                "split": self._split_mode(), "harness": self._harness_mode,
                "sandbox": self._sandbox, "chat_program": program_source_digest(),
                "harnesses": {role: h.id for role, h in self.config.agent_harnesses().items()},
                "route": self._route,
                "untrained_roles": sorted(self._untrained_roles),
                "untrained_base_url": self._untrained[0], "untrained_model": self._untrained[1]}

    # -- items --------------------------------------------------------------------------

    def _split_mode(self) -> str:
        fields = type(self.config.taskset).model_fields
        return f"field:{self._split_field}" if self._split_field in fields else "hash"

    def _item(self, task: Any, keep: bool = True) -> Item:
        data = task.data.model_dump(mode="json", exclude_none=True)
        content = _content(data)
        item = Item(id=str(task.data.id if task.data.id is not None else task.data.idx),
                    data=data, task=self.config.env_id, content=content)
        if keep:
            self._tasks[item.digest] = task
        return item

    def _tasks_of(self, split: Split) -> Iterator[Any]:
        taskset = self.env.taskset
        if self._split_mode() != "hash":
            config = self.config.taskset.model_copy(
                update={self._split_field: self._split_names[split]})
            taskset = self._loaders.load_taskset(config)
        if split != "train" and not taskset.bounded:
            if self._held_out_scan is None:
                raise ValueError(f"{self.name}: the taskset is infinite; give "
                                 "--env-arg held_out_scan=N (val and test come from its "
                                 "first N tasks)")
            taskset = taskset.take(int(self._held_out_scan))
        tasks: Iterator[Any] = iter(taskset)
        if self._split_mode() == "hash":
            val, test = self._fractions
            tasks = (t for t in tasks if hash_split(
                _content(t.data.model_dump(mode="json", exclude_none=True)), val, test) == split)
        return tasks

    def items(self, split: Split) -> Iterable[Item]:
        """The split's items (a list, or for an infinite taskset's train split a generator)."""
        if split in self._items:
            return self._items[split]
        if split == "train" and not self.env.taskset.bounded:
            return (self._item(t, keep=False) for t in self._tasks_of(split))
        self._items[split] = [self._item(t) for t in self._tasks_of(split)]
        return self._items[split]

    def _task(self, item: Item) -> Any:
        task = self._tasks.get(item.digest)
        if task is None:  # an infinite split's item, or one made elsewhere (a record):
            cls = type(self.env.taskset).task_type()  # rebuilt from its data
            task = cls(cls.data_type().model_validate(dict(item.data)), self.config.taskset.task)
        return task

    # -- lifecycle ----------------------------------------------------------------------

    async def setup(self) -> None:
        """Asks for untrained roles, then holds ``Env.serving()`` (interception server,
        shared tool servers) until `close`."""
        import openai

        if not self._probed:
            await self._probe_untrained()
        self._stack = contextlib.AsyncExitStack()
        await self._stack.enter_async_context(self.env.serving())
        self._pool = openai.DefaultAsyncHttpxClient()

    async def close(self) -> None:
        try:
            if self._stack is not None:
                await self._stack.aclose()
        finally:
            self._stack = None
            if self._pool is not None:
                await self._pool.aclose()
                self._pool = None

    # -- one rollout --------------------------------------------------------------------

    def _client_config(self, rollout: Rollout) -> Any:
        from verifiers.v1.clients import EvalClientConfig

        base_url = episode_url(rollout) if self._route == "url" else rollout.shared_base_url
        return EvalClientConfig(base_url=base_url, api_key_var=_NO_KEY_VAR)

    async def play(self, rollout: Rollout) -> Outcome:
        from verifiers.v1.clients import ModelContext
        from verifiers.v1.types import SamplingConfig

        from swarmrl.envs._verifiers_chat import ROUTE as CHAT_ROUTE
        from swarmrl.envs._verifiers_chat import RolloutRoute

        if self._stack is None:
            await self.setup()
        client = self._client_config(rollout)
        ctx = ModelContext(model=rollout.model, client=client,
                           sampling=SamplingConfig(**rollout.openai_sampling()))
        headers = rollout.headers if self._route == "header" else None
        token = CHAT_ROUTE.set(RolloutRoute(self._pool, client.base_url, headers))
        discarded: list[Any] = []
        traces: list[Any] = []
        try:
            episode = await self.env.run_episode(self._task(rollout.item), ctx,
                                                 on_trace=traces.append,
                                                 on_discard=discarded.append)
        finally:
            CHAT_ROUTE.reset(token)
            if self._route == "url":
                await self._forget_client(client, any(t.calls for t in traces))
        return self._outcome(episode, discarded, client)

    async def _forget_client(self, client: Any, made_calls: bool) -> None:
        await forget_upstream(getattr(self.env, "_interception", None),
                              client.model_dump_json(), made_calls, self.name)

    def _outcome(self, episode: Any, discarded: list[Any], client: Any) -> Outcome:
        if discarded:
            raise RuntimeError(f"{self.name}: verifiers retried an agent run within the "
                               "episode; its abandoned calls are in the swarmrl episode")
        errors = list(episode.errors) + [e for t in episode.traces for e in t.errors]
        if not episode.ok or errors:
            detail = "; ".join(f"{e.type}: {e.message}"[:300] for e in errors[:3])
            raise RuntimeError(f"{self.name}: the episode failed: {detail or 'not ok'}")
        trained = [t for t in episode.traces if t.agent.trainable]
        for trace in episode.traces:
            used = trace.agent.config.client
            if not trace.agent.trainable and used is not None and (
                    used.base_url == client.base_url):
                raise RuntimeError(
                    f"{self.name}: role {trace.agent.name!r} is untrainable but called the "
                    "trained episode's endpoint; set --env-arg untrained_base_url=URL")
        if len(trained) != 1:
            raise RuntimeError(f"{self.name}: the episode has {len(trained)} trainable traces; "
                               "swarmrl trains one reward per episode, so exactly one")
        trace = trained[0]
        metrics: dict[str, float] = {k: float(v) for k, v in trace.metrics.items()
                                     if v is not None}
        metrics.update({f"reward/{k}": float(r.value) for k, r in trace.rewards.items()
                        if r is not None})
        metrics["turns"] = float(trace.num_turns)
        metrics["calls"] = float(len(trace.calls))
        metrics["truncated"] = float(trace.is_truncated)
        success = trace.metrics.get("success")
        return Outcome(
            reward=float(trace.reward),
            success=None if success is None else bool(success),
            metrics=metrics,
            info={"trace_id": trace.id, "stop_condition": trace.stop_condition,
                  "truncated": trace.is_truncated,
                  "calls": len(trace.calls), "tools": sorted(t.name for t in trace.tools),
                  "untrained_calls": sum(len(t.calls) for t in episode.traces
                                         if not t.agent.trainable)})


async def forget_upstream(interception: Any, key: str, made_calls: bool, name: str) -> None:
    """Closes and drops the interception server's upstream client for one episode's client
    config (`key`, the config's JSON). verifiers keeps one per distinct config until
    ``serving()`` ends, and pushes its ``close`` on the server's exit stack; with a base
    URL per episode that is an open connection and ~7 KB held per episode played.
    verifiers 0.4 has no public way to drop one, so its internals are looked up, and a
    miss raises (`VerifiersInternalError`) rather than letting them pile up: an episode
    that made calls must have had a client."""
    servers = getattr(interception, "servers", None)
    if servers is None:
        servers = [interception] if hasattr(interception, "clients") else None
    if servers is None or not all(isinstance(getattr(s, "clients", None), dict)
                                  for s in servers):
        raise VerifiersInternalError(
            f"{name}: verifiers' interception ({type(interception).__name__}) has no "
            "per-server client cache where verifiers 0.4.0 keeps it "
            f"(Env._interception[.servers].clients); the adapter is built for verifiers "
            f"{VERIFIERS_VERSION}")
    found = 0
    for server in servers:
        upstream = server.clients.pop(key, None)
        if upstream is None:
            continue
        found += 1
        _drop_close_callback(server, upstream, name)
        await upstream.close()
    if made_calls and not found:
        raise VerifiersInternalError(
            f"{name}: the episode made model calls, but verifiers' interception server "
            "holds no client under its config's JSON: its client cache is keyed otherwise "
            f"than in verifiers {VERIFIERS_VERSION}, and every episode would leave a "
            "connection open")


def _drop_close_callback(server: Any, upstream: Any, name: str) -> None:
    """Removes ``upstream.close`` from the server's exit stack (``server.stack``, an
    ``AsyncExitStack``, whose callbacks wrap theirs as ``__wrapped__``)."""
    callbacks: Any = getattr(getattr(server, "stack", None), "_exit_callbacks", ())
    for entry in callbacks:
        if getattr(entry[1], "__wrapped__", None) == upstream.close:
            callbacks.remove(entry)
            return
    raise VerifiersInternalError(
        f"{name}: verifiers' interception server did not register its upstream client's "
        "close on its exit stack (server.stack) as verifiers "
        f"{VERIFIERS_VERSION} does; each episode's client would be held until the run ends")

