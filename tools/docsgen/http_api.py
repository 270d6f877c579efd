"""The HTTP shim's API, from the OpenAPI document its FastAPI app builds.

`build_app` is given a stand-in swarm: building the OpenAPI document reads the routes and
their pydantic models and calls no handler. The document itself is published next to the
page (`reference/openapi.json`).
"""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

from tools.docsgen import cell, table


def openapi() -> dict[str, Any]:
    from swarmrl_server.http.app import build_app

    return build_app(mock.MagicMock()).openapi()


def openapi_json() -> str:
    return json.dumps(openapi(), indent=1, sort_keys=True) + "\n"


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    for union in ("anyOf", "oneOf"):
        if union in schema:
            return " or ".join(_type(s) for s in schema[union])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    return str(kind)


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f"### {name}\n"]
    if schema.get("description"):
        out.append(cell(schema["description"]) + "\n")
    required = set(schema.get("required", []))
    rows: list[list[object]] = []
    for field, prop in schema.get("properties", {}).items():
        default = prop.get("default")
        rows.append([f"`{field}`", _type(prop), "yes" if field in required else "",
                     "" if default is None else f"`{json.dumps(default)}`",
                     prop.get("description", "")])
    if rows:
        out.append(table(["field", "type", "required", "default", "description"], rows))
    return out


def render() -> str:
    spec = openapi()
    out = [
        "# HTTP API (OpenAI / Anthropic compatible)\n",
        "Generated from the OpenAPI document the shim's FastAPI app builds "
        "(`swarmrl_server/http/app.py`); the document itself: [openapi.json](openapi.json). "
        "`swarmrl serve` serves it on `--http-port` (default 8000). Every route also exists "
        "under `/k/{episode_key}/...`, for harnesses that let one set a base URL but not a "
        "key. Calls authenticate with an episode's key (`StartEpisode` returns "
        "`openai_base_url` and `openai_api_key`). Errors are OpenAI- or Anthropic-shaped "
        "with the field in `param`: see [errors](errors.md). Outside the OpenAPI document: "
        "`GET /metrics` (Prometheus), `GET /swarmrl/live` (the live snapshot as JSON) and "
        "`/view/` (the episode viewer); see [observability](../how-to/observability.md).\n",
        "## Endpoints\n",
    ]
    rows: list[list[object]] = []
    for path, ops in spec["paths"].items():
        if path.startswith("/k/"):
            continue
        for method, op in ops.items():
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            request = _type(body["schema"]) if body else ""
            codes = ", ".join(c for c in op.get("responses", {}) if c != "422")
            rows.append([f"`{method.upper()} {path}`", op.get("summary", ""), request, codes])
    out.append(table(["route", "summary", "request body", "statuses"], rows))
    out.append("## Schemas\n")
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        out += _schema(name, schema)
    return "\n".join(out)
