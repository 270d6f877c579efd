"""Errors and their codes, from the server's own tables and raise sites.

A reason (`swarmrl_server.errors.Reason`) is raised with a code at its raise sites; the
pairs are read from the server's source (calls of `SwarmError(Code.X, Reason.Y, ...)`
and of the helpers `not_found`, `precondition`, `unavailable`, `invalid`). Each door then
maps the pair: `grpc/errors.py` to a gRPC status, `http/errors.py` to an HTTP status;
the SDK raises the `swarmrl.SwarmError` subclass whose `default_code` is that status.
"""

from __future__ import annotations

import ast
from collections import defaultdict

from tools.docsgen import REPO, table

SERVER = REPO / "server" / "swarmrl_server"
_HELPERS = {"not_found": "NOT_FOUND", "precondition": "FAILED_PRECONDITION",
            "unavailable": "UNAVAILABLE"}


def _name(node: ast.AST, owner: str) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == owner:
        return node.attr
    return None


def raise_sites() -> dict[tuple[str, str], set[str]]:
    """(code, reason) -> the server modules that raise it."""
    found: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in sorted(SERVER.rglob("*.py")):
        module = ".".join(path.relative_to(SERVER.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            args = node.args
            if func == "SwarmError" and len(args) >= 2:
                code, reason = _name(args[0], "Code"), _name(args[1], "Reason")
            elif func in _HELPERS and args:
                code, reason = _HELPERS[func], _name(args[0], "Reason")
            elif func == "invalid" and len(args) == 2 and module != "swarmrl_server.errors":
                code, reason = "INVALID_ARGUMENT", "INVALID_FIELD"
            else:
                continue
            if code and reason:
                found[(code, reason)].add(module.removeprefix("swarmrl_server."))
    return found


def rows() -> list[list[object]]:
    import swarmrl
    from swarmrl_server.errors import Code, Reason, SwarmError
    from swarmrl_server.grpc.errors import STATUS as GRPC_STATUS
    from swarmrl_server.http.errors import from_swarm_error

    sdk = {cls.default_code: cls.__name__ for cls in _subclasses(swarmrl.SwarmError)}
    sites = raise_sites()
    out: list[list[object]] = []
    for reason in Reason:
        for code in Code:
            if (code.name, reason.value) not in sites:
                continue
            status = GRPC_STATUS[code]
            http = from_swarm_error(SwarmError(code, reason, "x")).status
            where = ", ".join(f"`{m}`" for m in sorted(sites[(code.name, reason.value)])[:4])
            more = len(sites[(code.name, reason.value)]) - 4
            out.append([f"`{reason.value}`", f"`{status.name}`", http,
                        f"`swarmrl.{sdk.get(status, 'SwarmError')}`",
                        where + (f" and {more} more" if more > 0 else "")])
    return out


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        if "default_code" in vars(sub):
            found.append(sub)
        found += _subclasses(sub)
    return found


def _unraised() -> str:
    from swarmrl_server.errors import Reason

    raised = {reason for _, reason in raise_sites()}
    rest = [f"`{r.value}`" for r in Reason if r.value not in raised]
    if not rest:
        return ""
    return ("Declared but not raised as a `SwarmError` by the server's domain code: "
            + ", ".join(rest) + ". Missing or unknown API keys and a client key on an admin "
            "RPC are refused by the doors' own auth checks: `UNAUTHENTICATED` / "
            "`PERMISSION_DENIED` over gRPC, 401 over HTTP.\n")


def code_rows() -> list[list[object]]:
    from swarmrl_server.errors import Code
    from swarmrl_server.grpc.errors import STATUS as GRPC_STATUS
    from swarmrl_server.http.errors import STATUS as HTTP_STATUS

    return [[f"`{code.name}`", f"`{GRPC_STATUS[code].name}`", HTTP_STATUS[code]] for code in Code]


def render() -> str:
    return "\n".join([
        "# Errors\n",
        "Bad input gets a canonical status that names what was wrong, the server stays up and "
        "no partial state is left behind. Over gRPC the status carries `google.rpc` details: "
        "`ErrorInfo` (domain `swarmrl.dev`, the reason below), `BadRequest` (the field, e.g. "
        "`input.tokens.token_ids[1]`) for `INVALID_FIELD`, and `RetryInfo` (the delay) on "
        "`UNAVAILABLE`. Over HTTP the error is OpenAI- or Anthropic-shaped, `param` names the "
        "field, `code` is the reason, and a 429 or 503 carries `Retry-After`. The SDK raises a "
        "`swarmrl.SwarmError` subclass keyed by the status (`.reason`, `.field`, "
        "`.retry_delay`). Generated from `swarmrl_server/errors.py`, the doors' tables and the "
        "server's raise sites when the site is built.\n",
        "## Reasons\n",
        table(["reason", "gRPC status", "HTTP", "SDK exception", "raised in"], rows()),
        _unraised(),
        "## Codes\n",
        "Each domain code's status on each door (the HTTP table's one exception: "
        "`GENERATION_PAUSED` and `OVER_CAPACITY` are 429, by reason).\n",
        table(["domain code", "gRPC status", "HTTP"], code_rows()),
    ])
