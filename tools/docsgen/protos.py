"""The gRPC contract, from `protos/swarmrl/v1/*.proto` and their comments.

protoc (grpcio-tools' bundled copy, run in process) compiles the files into a descriptor
set with source info; each service, RPC, message, field, enum and value is rendered with
the comment above it. No network, no buf plugins.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from google.protobuf import descriptor_pb2

from tools.docsgen import REPO, cell, table

PROTO_ROOT = REPO / "protos"
_TYPES = {v: k[len("TYPE_"):].lower() for k, v in descriptor_pb2.FieldDescriptorProto.Type.items()}


def descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    import grpc_tools
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).parent / "_proto"
    files = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / "swarmrl").rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "protos.binpb"
        rc = protoc.main(["protoc", f"-I{PROTO_ROOT}", f"-I{include}", "--include_source_info",
                          f"--descriptor_set_out={out}", *files])
        if rc != 0:
            raise RuntimeError(f"protoc failed ({rc}) on {files}")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def _comments(file: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    return {tuple(loc.path): " ".join(loc.leading_comments.split())
            for loc in file.source_code_info.location if loc.leading_comments}


_MAPS: dict[str, descriptor_pb2.DescriptorProto] = {}


def _index_maps(msg: descriptor_pb2.DescriptorProto, prefix: str) -> None:
    for nested in msg.nested_type:
        full = f"{prefix}.{msg.name}.{nested.name}"
        if nested.options.map_entry:
            _MAPS[full] = nested
        _index_maps(nested, f"{prefix}.{msg.name}")


def _type(field: descriptor_pb2.FieldDescriptorProto) -> str:
    entry = _MAPS.get(field.type_name)
    if entry is not None:
        key, value = entry.field
        return f"map<{_type(key)}, {_type(value)}>"
    name = field.type_name.rsplit(".", 1)[-1] if field.type_name else _TYPES[field.type]
    if field.type_name.startswith(".swarmrl."):
        name = f"[{name}](#{name.lower()})"
    if field.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED:
        name = f"repeated {name}"
    elif field.proto3_optional:
        name = f"optional {name}"
    return name


def _message(msg: descriptor_pb2.DescriptorProto, path: tuple[int, ...],
             docs: dict[tuple[int, ...], str], prefix: str = "") -> list[str]:
    if msg.options.map_entry:
        return []
    name = prefix + msg.name
    out = [f"### {name}\n", docs.get(path, "") + "\n"]
    rows: list[list[object]] = [[f"`{f.name}`", f.number, _type(f), docs.get((*path, 2, i), "")]
                                for i, f in enumerate(msg.field)]
    if rows:
        out.append(table(["field", "number", "type", "description"], rows))
    for i, enum in enumerate(msg.enum_type):
        out += _enum(enum, (*path, 4, i), docs, f"{name}.")
    for i, nested in enumerate(msg.nested_type):
        out += _message(nested, (*path, 3, i), docs, f"{name}.")
    return out


def _enum(enum: descriptor_pb2.EnumDescriptorProto, path: tuple[int, ...],
          docs: dict[tuple[int, ...], str], prefix: str = "") -> list[str]:
    rows: list[list[object]] = [[f"`{v.name}`", v.number, docs.get((*path, 2, i), "")]
                                for i, v in enumerate(enum.value)]
    return [f"### {prefix}{enum.name}\n", docs.get(path, "") + "\n",
            table(["value", "number", "description"], rows)]


def render() -> str:
    out = [
        "# gRPC contract\n",
        "Generated from `protos/swarmrl/v1/*.proto` and their comments when the site is built "
        "(protoc with `--include_source_info`). Package `swarmrl.v1`; the Python code is "
        "`swarmrl_proto`, the other languages' stubs are in `sdk_stubs/`. Errors are "
        "canonical gRPC statuses with `google.rpc` details: see [errors](errors.md).\n",
    ]
    files = descriptor_set().file
    for file in files:
        for msg in file.message_type:
            _index_maps(msg, f".{file.package}")
    for file in files:
        if not file.name.startswith("swarmrl/"):
            continue
        docs = _comments(file)
        out.append(f"## {file.name}\n")
        for i, service in enumerate(file.service):
            out.append(f"### {service.name}\n")
            out.append(docs.get((6, i), "") + "\n")
            rows: list[list[object]] = []
            for j, method in enumerate(service.method):
                stream = "stream " if method.server_streaming else ""
                req = method.input_type.rsplit(".", 1)[-1]
                resp = method.output_type.rsplit(".", 1)[-1]
                rows.append([f"`{method.name}`", f"[{req}](#{req.lower()})",
                             f"{stream}[{resp}](#{resp.lower()})", docs.get((6, i, 2, j), "")])
            out.append(table(["RPC", "request", "response", "description"], rows))
        for i, msg in enumerate(file.message_type):
            out += _message(msg, (4, i), docs)
        for i, enum in enumerate(file.enum_type):
            out += _enum(enum, (5, i), docs)
    return "\n".join(out)


__all__ = ["cell", "descriptor_set", "render"]
