"""What an environment is: items in named splits, and one rollout of an item.

An environment is the thing a user brings: a dataset of problems and a scorer, a game,
a tool sandbox, a verifiers environment, an OpenEnv server. swarmrl needs two things
from it, and this module states them as an abstract base class:

- ``items(split)``: the items of a split ("train", "val", "test"). Each `Item` carries
  its data, the task it belongs to (GRPO groups and per-task reports are per task),
  and what identifies its *content* (`Item.content`): the runner never plays an item
  of val or test for training, and checks that on content, not on ids or file names.
- ``play(rollout)``: plays one rollout of an item against one swarmrl episode and
  returns an `Outcome` (reward, success, metrics). Every model call the rollout makes
  goes through the episode: the SDK's ``rollout.chat``, or an OpenAI / Anthropic client
  bound to the episode (``rollout.openai()``, ``rollout.anthropic()``), or any
  HTTP harness given ``rollout.base_url`` and ``rollout.headers``. The server records
  each call with its exact token ids; the runner ends the episode with the reward.

The environment never starts, ends or aborts episodes itself; the runner owns that
(so a failed rollout is aborted, never trained, and a retry is a fresh episode).

**Roles.** An environment of several agents (a proposer and a solver, two players, a
judge) declares ``roles``; a rollout then holds **one episode per role**, each on that
role's model (`swarmrl.envs._roles`), and a call names its role
(``rollout.chat(..., role="solver")``, ``rollout.openai(role=...)``,
``rollout.base_url_for(role)``). ``play`` returns one reward per role
(``Outcome(rewards={...})``) and each role's episode is ended with its own reward, so each
role's calls train that role's model on that reward, and form that role's own timelines.
An environment that declares no roles has one unnamed role (``""``): one episode, as
before.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import importlib
import json
import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from swarmrl._sampling import SamplingParams
from swarmrl._types import ChatMessage, Completion, Tool

if TYPE_CHECKING:
    import anthropic
    import openai

    from swarmrl._episode import AsyncEpisode

__all__ = ["SPLITS", "Environment", "HttpPools", "Item", "Outcome", "Rollout", "Split",
           "canonical_json"]

Split = Literal["train", "val", "test"]
SPLITS: tuple[Split, ...] = ("train", "val", "test")
"""The splits every environment names: train for training, val to choose settings and
checkpoints, test to report once per run."""

@dataclass(frozen=True)
class Item:
    """One problem, game or task instance of an environment."""

    id: str
    """Identifier within the environment (shown in reports; not used for the split check)."""
    data: Mapping[str, Any] = field(default_factory=dict)
    """What `Environment.play` needs to play it (JSON-serialisable for records)."""
    task: str = "default"
    """The task it belongs to: the episode's task id, the unit of per-task reports and of
    the trainer's task mix."""
    content: str | None = None
    """What identifies the item's content for the split check; None: `data` as canonical
    JSON (`canonical_json`). Set it when `data` holds something incidental, such as a file
    path (the file's bytes, a question's text), or something JSON cannot hold."""

    @property
    def digest(self) -> str:
        """SHA-256 of `content` (or of `canonical_json(data)`): equal items, equal digests,
        in every process and on every machine. TypeError (naming the item and the value)
        when `data` holds a value with no canonical JSON form and `content` is not set."""
        if self.content is not None:
            text = self.content
        else:
            try:
                text = canonical_json(self.data)
            except TypeError as err:
                raise TypeError(f"item {self.id!r}: {err}") from None
        return hashlib.sha256(text.encode()).hexdigest()


def canonical_json(value: Any) -> str:
    """One JSON text for every value equal to `value`, whatever the process: what an item's
    digest hashes, so that a val item is found again in train on another machine.

    - objects' keys sorted; a key that is not a string is written as JSON writes it
      (``1`` and ``1.0`` as ``"1"``, ``True`` as ``"true"``), and two keys that would write
      the same (``1`` and ``"1"``) are refused;
    - numbers by value: an int and an equal float are one number (``1 == 1.0``, written
      ``1``); other floats by their shortest repr; NaN and the infinities as JSON's
      extensions write them (``NaN``, ``Infinity``, ``-Infinity``: every NaN alike);
    - tuples as lists; sets and frozensets as lists sorted by their members' text (so a
      set's iteration order, which varies with ``PYTHONHASHSEED`` for strings, is not
      hashed);
    - anything else (a path, bytes, a dataclass) is refused with TypeError: its text would
      be a guess (``str`` of an object may hold a memory address), so the item should say
      what identifies it in `Item.content`.

    For data of strings, ints, non-integral floats, lists and string-keyed dicts it is the
    text ``json.dumps(data, sort_keys=True, separators=(",", ":"))`` gives."""
    return _canonical(value, "data")


def _canonical(v: Any, where: str) -> str:
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, numbers.Integral):
        return str(int(v))
    if isinstance(v, numbers.Real):
        f = float(v)
        if math.isnan(f):
            return "NaN"
        if math.isinf(f):
            return "Infinity" if f > 0 else "-Infinity"
        return str(int(f)) if f.is_integer() else repr(f)
    if isinstance(v, Mapping):
        members: dict[str, str] = {}
        for k, item in v.items():
            key = k if isinstance(k, str) else _canonical(k, f"{where} key {k!r}")
            if key in members:
                raise TypeError(f"{where}: keys {key!r} and {k!r} are one JSON key; set "
                                "Item.content to what identifies the item")
            members[key] = _canonical(item, f"{where}[{k!r}]")
        return "{" + ",".join(f"{json.dumps(k)}:{members[k]}" for k in sorted(members)) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_canonical(x, f"{where}[{i}]") for i, x in enumerate(v)) + "]"
    if isinstance(v, (set, frozenset)):
        return "[" + ",".join(sorted(_canonical(x, f"{where} member") for x in v)) + "]"
    raise TypeError(f"{where}: a {type(v).__name__} has no canonical JSON form; set "
                    "Item.content to what identifies the item (a file's bytes, a question's "
                    "text)")


@dataclass(frozen=True)
class Outcome:
    """What one rollout earned."""

    reward: float = math.nan
    """The episode's reward: what the trainer trains on (with roles: the reward of each
    role not named in `rewards`)."""
    success: bool | None = None
    """Whether the rollout solved the item; None: the environment does not define success
    (evaluation then reports the mean reward instead of a success rate)."""
    metrics: Mapping[str, float] = field(default_factory=dict)
    """Numbers to log and average (turns, tool calls, partial credit, ...)."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """Anything else worth keeping in the rollout's record (JSON-serialisable)."""
    rewards: Mapping[str, float] = field(default_factory=dict)
    """One reward per role (an environment with `Environment.roles`): each role's episode
    is ended with its own, so each role's model trains on its own reward."""

    def reward_for(self, role: str) -> float:
        """The reward of `role`'s episode: ``rewards[role]``, else `reward`."""
        return float(self.rewards[role]) if role in self.rewards else float(self.reward)

    @property
    def overall(self) -> float:
        """The rollout's one reward for reports: `reward`, or, when only `rewards` was
        given, their mean."""
        if math.isfinite(self.reward) or not self.rewards:
            return float(self.reward)
        return sum(map(float, self.rewards.values())) / len(self.rewards)


class HttpPools:
    """One connection pool per HTTP client library, shared by every rollout of a runner.

    An OpenAI client per rollout would otherwise open (and, cached by a harness, keep)
    a connection per episode; clients built on one pool keep at most `size` open to the
    server, whatever the number of episodes.

    A rollout's client may be closed (``async with rollout.openai() as client:``, the
    OpenAI SDK's own idiom, or ``await client.close()``): that closes the client, not the
    pool, whose ``aclose`` (and ``async with``) does nothing for them (`_shared_pool_class`).
    Only the runner closes the pool, with `HttpPools.aclose`, once every rollout is done.
    """

    def __init__(self, size: int, timeout_s: float) -> None:
        self._size = size
        self._timeout_s = timeout_s
        self._pools: dict[type[Any], Any] = {}

    def get(self, client_cls: type) -> Any:
        """A shared instance of `client_cls`, a library's default async httpx client
        (``openai.DefaultAsyncHttpxClient``); its ``Limits`` come from the same httpx
        module it subclasses (openai 3 ships on httpx2, openai 2 on httpx)."""
        pool = self._pools.get(client_cls)
        if pool is None:
            base = next(c for c in client_cls.__mro__ if c.__name__ == "AsyncClient")
            httpx = importlib.import_module(base.__module__.split(".")[0])
            pool = _shared_pool_class(client_cls)(
                limits=httpx.Limits(max_connections=self._size,
                                    max_keepalive_connections=self._size),
                timeout=httpx.Timeout(self._timeout_s, connect=30.0))
            self._pools[client_cls] = pool
        return pool

    async def aclose(self) -> None:
        """Closes every pool (the clients' ``aclose`` does not: it is the library's own)."""
        for client_cls, pool in self._pools.items():
            await client_cls.aclose(pool)
        self._pools.clear()


_SHARED_CLASSES: dict[type, type] = {}


def _shared_pool_class(client_cls: type) -> type:
    """`client_cls` (an httpx ``AsyncClient`` subclass: the SDKs accept nothing else) with
    ``aclose`` and the context manager made no-ops: a client that closes its HTTP client on
    exit (``AsyncOpenAI.close``, ``AsyncAnthropic.close``) leaves the shared pool open for
    the other rollouts. `HttpPools.aclose` closes it with ``client_cls.aclose``."""
    shared = _SHARED_CLASSES.get(client_cls)
    if shared is None:
        async def aclose(self: Any) -> None:
            """Does nothing: the pool is shared by the runner's rollouts (`HttpPools`)."""

        async def __aenter__(self: Any) -> Any:  # noqa: N807 - the protocol's own name
            return self

        async def __aexit__(self: Any, *exc: object) -> None:  # noqa: N807
            """Does nothing: see `aclose`."""

        shared = type(f"Shared{client_cls.__name__}", (client_cls,), {
            "aclose": aclose, "__aenter__": __aenter__, "__aexit__": __aexit__,
            "__module__": __name__, "__doc__": _shared_pool_class.__doc__})
        _SHARED_CLASSES[client_cls] = shared
    return shared


class Rollout:
    """One rollout in progress: the item, its split, and the episode every call goes through.

    Made by the runner and handed to `Environment.play`. The clients it makes share
    the runner's connection pool, so any number of rollouts keep at most the runner's
    concurrency in open connections.
    """

    def __init__(
        self,
        item: Item,
        split: Split,
        episode: AsyncEpisode,
        *,
        model: str,
        sampling: SamplingParams,
        pools: HttpPools | None = None,
        attempt: int = 0,
        roles: Mapping[str, tuple[AsyncEpisode, str]] | None = None,
    ) -> None:
        self.item = item
        """The item played."""
        self.split = split
        """The split it comes from; "train" rollouts are trained on, the others never."""
        self.episode = episode
        """The swarmrl episode recording this rollout's calls (with roles: the first
        role's; `episode_of` gives each role's)."""
        self.model = model
        """The model name to put in requests (``model=`` of an OpenAI call); with roles,
        the first role's (`model_of`)."""
        self.sampling = sampling
        """How to sample: the runner's training sampling, or greedy for evaluation. Pass it
        on (`chat` does; `openai_sampling` gives it as OpenAI request fields)."""
        self.attempt = attempt
        """0 for the first attempt; a retry after a failure is a fresh episode, attempt + 1."""
        self.roles: dict[str, tuple[AsyncEpisode, str]] = dict(roles or {"": (episode, model)})
        """Each role's episode and model (one unnamed role ``""`` when the environment
        declares none)."""
        self._pools = pools or HttpPools(1, 600.0)

    def _role(self, role: str | None) -> tuple[AsyncEpisode, str]:
        """`role`'s episode and model; None: the first role's. An unknown role is a bug
        in ``play()`` (TypeError: it stops the run, as every rollout would meet it)."""
        if role is None:
            return self.episode, self.model
        try:
            return self.roles[role]
        except KeyError:
            raise TypeError(f"role {role!r} is not one of the environment's roles "
                            f"{sorted(self.roles)}") from None

    def episode_of(self, role: str) -> AsyncEpisode:
        """`role`'s episode."""
        return self._role(role)[0]

    def model_of(self, role: str) -> str:
        """`role`'s model name."""
        return self._role(role)[1]

    def base_url_for(self, role: str | None = None) -> str:
        """`role`'s episode's own OpenAI-compatible base URL (a harness per role)."""
        ep = self._role(role)[0]
        return f"{ep.openai_base_url.removesuffix('/v1')}/k/{ep.openai_api_key}/v1"

    def headers_for(self, role: str | None = None) -> dict[str, str]:
        """Headers that name `role`'s episode on `shared_base_url`."""
        return self._role(role)[0].http_headers

    @property
    def base_url(self) -> str:
        """The episode's own OpenAI-compatible base URL (``.../k/<key>/v1``): an
        unmodified agent that only takes a base URL lands every call in this episode."""
        return self.base_url_for(None)

    @property
    def api_key(self) -> str:
        """The episode's API key (also accepted as ``Authorization: Bearer``)."""
        return self.episode.openai_api_key

    @property
    def shared_base_url(self) -> str:
        """The server's stable base URL (``.../v1``), the same for every episode: with the
        key as the client's API key, or with `headers` on each request (for a harness that
        caches one client per URL and sets its own ``Authorization``)."""
        return self.episode.openai_base_url

    @property
    def headers(self) -> dict[str, str]:
        """Headers that name this episode on `shared_base_url`."""
        return self.episode.http_headers

    def openai_sampling(self) -> dict[str, Any]:
        """`sampling` as OpenAI request fields (only those set): ``temperature``,
        ``top_p``, ``max_tokens``, ``stop``, ``seed``."""
        s = self.sampling
        fields = {"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens,
                  "stop": list(s.stop) if isinstance(s.stop, Sequence) and not isinstance(
                      s.stop, str) else s.stop, "seed": s.seed}
        return {k: v for k, v in fields.items() if v is not None}

    async def chat(
        self, messages: Sequence[ChatMessage], *, tools: Sequence[Tool] | None = None,
        role: str | None = None, **options: Any,
    ) -> Completion:
        """One chat call through the SDK, with the rollout's model and sampling; keyword
        options (``max_tokens=...``, ``stop=...``) override the sampling's fields. `role`:
        the call is `role`'s, in its episode, on its model (None: the first role)."""
        sampling = dataclasses.replace(self.sampling, **options) if options else self.sampling
        episode, model = self._role(role)
        return await episode.chat(messages, model=model, tools=tools, sampling=sampling)

    def openai(self, *, role: str | None = None, **kwargs: Any) -> openai.AsyncOpenAI:
        """An ``openai.AsyncOpenAI`` client bound to this episode (its base URL and key;
        `role`'s episode's with roles), on the runner's shared connection pool; closing it
        (``async with ... as client:``) leaves the pool to the other rollouts. Needs
        ``pip install openai``."""
        import openai

        episode = self._role(role)[0]
        return openai.AsyncOpenAI(base_url=self.base_url_for(role),
                                  api_key=episode.openai_api_key,
                                  http_client=self._pools.get(openai.DefaultAsyncHttpxClient),
                                  **kwargs)

    def anthropic(self, *, role: str | None = None, **kwargs: Any) -> anthropic.AsyncAnthropic:
        """An ``anthropic.AsyncAnthropic`` client bound to this episode (`role`'s), on the
        shared pool as `openai` is (closing it leaves the pool open). Needs
        ``pip install anthropic``."""
        import anthropic

        # the Anthropic client appends /v1/messages
        base = self.base_url_for(role).removesuffix("/v1")
        return anthropic.AsyncAnthropic(
            base_url=base, api_key=self._role(role)[0].openai_api_key,
            http_client=self._pools.get(anthropic.DefaultAsyncHttpxClient), **kwargs)


class Environment(abc.ABC):
    """An environment swarmrl can train on and evaluate: subclass it, or adapt one
    (`swarmrl.envs.verifiers`, `swarmrl.envs.openenv`).

    .. code-block:: python

        class Add(swarmrl.envs.Environment):
            name = "add"

            def items(self, split):
                seed = {"train": 0, "val": 1, "test": 2}[split]
                rng = random.Random(seed)
                for i in range(1000 if split == "train" else 50):
                    a, b = rng.randint(0, 99), rng.randint(0, 99)
                    yield Item(f"{split}-{i}", {"a": a, "b": b, "answer": a + b})

            async def play(self, rollout):
                q = rollout.item.data
                c = await rollout.chat([{"role": "user", "content": f"{q['a']}+{q['b']}="}])
                ok = c.text.strip() == str(q["answer"])
                return Outcome(reward=float(ok), success=ok)
    """

    name: str = ""
    """A short name for logs and records (the class name when empty)."""
    roles: tuple[str, ...] = ("",)
    """The roles of its agents (``("proposer", "solver")``): a rollout holds one episode
    per role, each on the model the run maps the role to (``--role NAME=MODEL``), and
    ``play`` returns ``Outcome(rewards={role: reward})``. The default, one unnamed role,
    is a single-agent environment."""

    @abc.abstractmethod
    def items(self, split: Split) -> Iterable[Item]:
        """The items of `split`. val and test must be finite (they are played whole);
        train may be endless (a generator of fresh problems), or finite (the runner cycles
        it, reshuffled each pass)."""

    @abc.abstractmethod
    async def play(self, rollout: Rollout) -> Outcome:
        """Plays one rollout of ``rollout.item``; every model call goes through
        ``rollout`` (see `Rollout`). Raising fails the rollout: the runner aborts its
        episode (never trained) and may retry it as a fresh episode. When the model's
        output is at fault, raise `swarmrl.envs.PolicyError` instead: the rollout is then
        trained with the error's reward, never retried."""

    async def setup(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Called once before the first rollout (start a server, load games, ...)."""

    async def close(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Called once after the last rollout."""

    def describe(self) -> dict[str, Any]:
        """The settings that define this environment, for run records (its arguments)."""
        return {}

    @property
    def label(self) -> str:
        """`name`, or the class name."""
        return self.name or type(self).__name__
