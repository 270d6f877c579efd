"""verifiers' chat program, run in process: what ``harness=inprocess`` plays instead of
verifiers' ``null`` harness (`swarmrl.envs.verifiers`; opt-in).

verifiers' ``null`` harness launches one chat program per turn as a ``uv`` script (PEP
723 dependencies fetched from PyPI on first use, ~2 s a turn to start). This harness
runs *the same program source* (``CHAT_PROGRAM_SOURCE``: verifiers' chat loop, MCP
client and compactor, bundled exactly as the ``uv`` script bundles them) inside the
rollout's event loop instead. verifiers allows that: "a harness may run its loop
in-process instead of launching a program, as long as every model call goes through
`endpoint` + `secret`" (``Harness.launch``). Its semantics are ``null``'s: the task's
prompt, its MCP tools, a loop until a reply without tool calls; no tools of its own, so
nothing of the model's runs here. The program is verifiers' internal source: the
functions this module calls are checked by name and parameters when it is first
loaded (`ProgramMismatch`).

Two things differ from the subprocess, both about connections:

- the program's OpenAI client rides one shared connection pool (`RolloutRoute.pool`)
  to the interception server instead of a fresh one per turn, and retries nothing
  (``max_retries=0``: a failed call fails the rollout, which swarmrl retries as a fresh
  episode; a retried call could otherwise land twice in one episode);
- with `RolloutRoute.header` set, its requests carry the episode header, which the
  interception server forwards upstream, so every rollout can share one client config
  (the server's stable base URL) and so one upstream connection pool.

Imported only by `swarmrl.envs.verifiers` (it needs verifiers); verifiers loads harnesses
by id, so `register()` installs this module under `HARNESS_ID`.
"""

from __future__ import annotations

import argparse
import contextvars
import functools
import json
import sys
import traceback
import types
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

HARNESS_ID = "swarmrl_chat"
"""The harness id a role's ``harness.id`` names to play in process."""


@dataclass(frozen=True)
class RolloutRoute:
    """What the harness needs from the rollout it plays in (set by the adapter)."""

    pool: Any
    """A shared ``openai.DefaultAsyncHttpxClient`` (connections to the interception server)."""
    upstream_base_url: str
    """The base URL of the policy's client config: only requests to it carry `header`."""
    headers: Mapping[str, str] | None = None
    """The episode's headers, forwarded upstream (None: the base URL names the episode)."""


ROUTE: contextvars.ContextVar[RolloutRoute | None] = contextvars.ContextVar(
    "swarmrl_verifiers_route", default=None)
"""Set by the adapter around ``Env.run_episode``; verifiers runs agents in tasks made
inside it, which copy the context."""


_PROGRAM_API = {
    "connect_mcp": ("config", "stack", "reserved"),
    "Compactor": ("client", "model", "tools", "enabled", "threshold"),
    "run_chat_loop": ("args", "compactor", "messages", "dispatch", "servers", "tool_client"),
}
"""What `run_program` calls in verifiers' chat program, with the parameters it passes
(verifiers 0.4.0's ``harnesses/utils/core.py``, ``mcp.py``, ``compaction.py``)."""


@functools.cache
def _program() -> dict[str, Any]:
    """verifiers' bundled chat program as a namespace (its ``__main__`` guard stays inert).
    Each function `run_program` calls is checked by name and parameters: the program is
    verifiers' internal source, and another version's must fail here, loudly, not
    mid-rollout or (worse) by quietly doing something else."""
    return program_namespace(_chat_program_source())


def _chat_program_source() -> str:
    try:
        from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
    except ImportError as exc:
        raise ProgramMismatch("verifiers.v1.harnesses.utils.launch.CHAT_PROGRAM_SOURCE is "
                              "gone") from exc
    if not isinstance(CHAT_PROGRAM_SOURCE, str):
        raise ProgramMismatch("CHAT_PROGRAM_SOURCE is not the program's source text")
    return CHAT_PROGRAM_SOURCE


class ProgramMismatch(RuntimeError):
    """verifiers' chat program is not the one the in-process harness was built for."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"the {HARNESS_ID} harness runs verifiers 0.4.0's chat program in "
                         f"process, but {detail}; use verifiers==0.4.0 or drop "
                         "harness=inprocess")


def program_namespace(source: str) -> dict[str, Any]:
    """`source` executed as a module namespace, checked against `_PROGRAM_API`."""
    import inspect

    namespace: dict[str, Any] = {"__name__": "swarmrl_verifiers_chat_program"}
    exec(compile(source, "<verifiers chat program>", "exec"), namespace)
    for name, params in _PROGRAM_API.items():
        found = namespace.get(name)
        if not callable(found):
            raise ProgramMismatch(f"its chat program defines no {name}")
        have = list(inspect.signature(found).parameters.values())
        required_beyond = [p.name for p in have[len(params):] if p.default is p.empty
                           and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if tuple(p.name for p in have[:len(params)]) != params or required_beyond:
            raise ProgramMismatch(f"its {name} takes {tuple(p.name for p in have)}, "
                                  f"not {params}")
    return namespace


async def run_program(ctx: Any, trace: Any, endpoint: str, secret: str,
                      mcp_urls: dict[str, str], system_prompt: str | None, prompt: Any,
                      tool_interception_url: str | None, tool_timeout: float) -> Any:
    """The body of the chat program's ``main()``, with its arguments given instead of
    parsed from argv. Returns a ``ProgramResult`` as the subprocess would have."""
    import httpx
    from openai import AsyncOpenAI
    from verifiers.v1.dialects.chat import message_to_wire
    from verifiers.v1.runtimes import ProgramResult

    program = _program()
    route = ROUTE.get()
    if route is None:
        raise RuntimeError(f"the {HARNESS_ID} harness plays only inside swarmrl.envs.verifiers")
    headers = dict(route.headers) if route.headers and (
        ctx.client.base_url == route.upstream_base_url) else None
    args = argparse.Namespace(
        base_url=endpoint, api_key=secret, model=ctx.model,
        tool_interception_url=tool_interception_url or "", bash=False, edit=False,
        search=False, serper_key="", compaction=False, summarize_at_tokens=None)
    client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0,
                         default_headers=headers, http_client=route.pool)
    tool_client = (httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0))
                   if tool_interception_url else None)
    try:
        async with AsyncExitStack() as mcp_stack:
            tools: list[dict[str, Any]] = []
            dispatch: dict[str, Any] = {}
            servers: dict[str, Any] = {}
            if mcp_urls:
                config = {"mcpServers": {name: {"url": url, "timeout": tool_timeout}
                                         for name, url in mcp_urls.items()}}
                tools, dispatch, servers = await program["connect_mcp"](config, mcp_stack, set())
            messages: list[dict[str, Any]] = (
                [{"role": "system", "content": system_prompt}] if system_prompt else [])
            if isinstance(prompt, str):
                messages.append({"role": "user", "content": prompt})
            elif prompt is not None:
                messages.extend(message_to_wire(m) for m in prompt)
            compactor = program["Compactor"](client, ctx.model, tools, False, None)
            compactor.note_good(messages)
            await program["run_chat_loop"](args, compactor, messages, dispatch, servers,
                                           tool_client)
    except SystemExit as exit_:  # the program's exit on a model transport error
        code = exit_.code if isinstance(exit_.code, int) else 1
        return ProgramResult(code, "", traceback.format_exc())
    finally:
        if tool_client is not None:
            await tool_client.aclose()
    return ProgramResult(0, "", "")


def _module() -> types.ModuleType:
    """The harness plugin module: ``__all__`` exporting one `Harness` subclass, the shape
    verifiers' loader takes."""
    from verifiers.v1.configs.harness import HarnessConfig
    from verifiers.v1.harness import Harness

    # verifiers is untyped here (Any), hence the ignore.
    class SwarmrlChatHarness(Harness[HarnessConfig]):  # type: ignore[misc]
        """verifiers' chat program in process (module docstring); ``null``'s flags."""

        APPENDS_SYSTEM_PROMPT = True
        SUPPORTS_MCP = True
        SUPPORTS_RESUME = True
        SUPPORTS_TOOL_INTERCEPTION = True
        EXECUTES_CODE = False
        NEEDS_CONTAINER = False

        async def launch(self, ctx: Any, trace: Any, runtime: Any, endpoint: str,
                         secret: str, mcp_urls: dict[str, str], data: Any,
                         tool_interception_url: str | None = None) -> Any:
            system_prompt, prompt = self.resolve_prompt(data)
            return await run_program(ctx, trace, endpoint, secret, mcp_urls, system_prompt,
                                     prompt, tool_interception_url, self.config.tool_timeout)

    module = types.ModuleType(HARNESS_ID, __doc__)
    module.SwarmrlChatHarness = SwarmrlChatHarness  # type: ignore[attr-defined]
    module.__all__ = ["SwarmrlChatHarness"]  # type: ignore[attr-defined]
    return module


def register() -> None:
    """Makes `HARNESS_ID` importable, where verifiers' loader looks for a harness id."""
    if HARNESS_ID not in sys.modules:
        sys.modules[HARNESS_ID] = _module()


def check_program() -> None:
    """Loads and checks verifiers' chat program now (at the environment's load), so a
    mismatch is refused before any rollout (`ProgramMismatch`)."""
    _program()


def program_source_digest() -> str:
    """Which chat program runs (for run records): a digest of verifiers' bundled source."""
    import hashlib

    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

    return hashlib.sha256(json.dumps(CHAT_PROGRAM_SOURCE).encode()).hexdigest()[:16]
