"""Undecodable requests are the caller's error: INVALID_ARGUMENT naming the field.

gRPC deserializes a request before any servicer code runs, and a deserializer that
raises ends the call with UNKNOWN and no details. `DecodeInterceptor` wraps every
handler's deserializer so that a failure becomes a value the wrapped method turns
into INVALID_ARGUMENT (with google.rpc.BadRequest naming the field where it can be
found: a string field holding invalid UTF-8, a truncated field), before any work.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor as pb_descriptor
from google.protobuf import descriptor_pool

from swarmrl_server.errors import invalid
from swarmrl_server.grpc.errors import to_status
from swarmrl_server.grpc.handlers import (
    Context,
    Continuation,
    Handler,
    Interceptor,
    abort_with_status,
)


@dataclass(frozen=True)
class _Undecodable:
    field: str
    detail: str


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def _repeated(field: pb_descriptor.FieldDescriptor) -> bool:
    return field.is_repeated  # protobuf >= 6 drops `label`


def find_bad_field(desc: pb_descriptor.Descriptor, buf: bytes, path: str = "") -> tuple[str, str]:
    """Walks the wire format of `buf` as message `desc`: (field path, what is wrong) of
    the first field that cannot be decoded, or ("", "") if none is found this way."""
    pos = 0
    index: dict[str, int] = {}
    while pos < len(buf):
        try:
            tag, pos = _varint(buf, pos)
        except ValueError:
            return path or "request", "truncated field tag"
        number, wire = tag >> 3, tag & 7
        field = desc.fields_by_number.get(number)
        name = field.name if field is not None else f"#{number}"
        where = f"{path}.{name}" if path else name
        if field is not None and _repeated(field):
            i = index.get(name, 0)
            index[name] = i + 1
            where = f"{where}[{i}]"
        try:
            if wire == 0:
                _, pos = _varint(buf, pos)
            elif wire == 1:
                pos += 8
            elif wire == 5:
                pos += 4
            elif wire == 2:
                length, pos = _varint(buf, pos)
                chunk = buf[pos:pos + length]
                if len(chunk) != length:
                    return where, "truncated (length runs past the end)"
                pos += length
                if field is not None and field.type == field.TYPE_STRING:
                    try:
                        chunk.decode("utf-8")
                    except UnicodeDecodeError:
                        return where, "is not valid UTF-8"
                elif (field is not None and field.type == field.TYPE_MESSAGE
                      and field.message_type is not None):
                    found = find_bad_field(field.message_type, chunk, where)
                    if found[0]:
                        return found
            else:
                return where, f"unsupported wire type {wire}"
        except ValueError:
            return where, "truncated"
        if pos > len(buf):
            return where, "truncated (runs past the end)"
    return "", ""


def _safe(deserializer: Callable[[bytes], Any], method: str) -> Callable[[bytes], Any]:
    def decode(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as err:  # DecodeError and anything a malformed message raises
            field, detail = "request", f"cannot be decoded ({err})"
            desc = _request_descriptor(method)
            try:
                found = find_bad_field(desc, raw) if desc is not None else ("", "")
            except Exception:  # the walk is best effort; the answer stays INVALID_ARGUMENT
                found = ("", "")
            if found[0]:
                field, detail = found
            return _Undecodable(field, detail)

    return decode


def _request_descriptor(method: str) -> pb_descriptor.Descriptor | None:
    try:
        service, name = method.lstrip("/").rsplit("/", 1)
        pool = descriptor_pool.Default()  # where the generated modules register
        return pool.FindServiceByName(service).methods_by_name[name].input_type
    except (KeyError, ValueError):
        return None


async def _refuse(context: Context, bad: _Undecodable) -> None:
    await abort_with_status(context, to_status(invalid(bad.field, bad.detail)))


def _wrap_unary(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def handler(request: Any, context: Any) -> Any:
        if isinstance(request, _Undecodable):
            await _refuse(context, request)
        return await fn(request, context)

    return handler


def _wrap_stream(fn: Callable[..., Any]) -> Callable[..., Any]:
    async def handler(request: Any, context: Any) -> Any:
        if isinstance(request, _Undecodable):
            await _refuse(context, request)
        async for item in fn(request, context):
            yield item

    return handler


class DecodeInterceptor(Interceptor):
    """Makes undecodable unary requests INVALID_ARGUMENT instead of UNKNOWN."""

    async def intercept_service(
        self,
        continuation: Continuation,
        details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None or handler.request_streaming:
            return handler
        decode = _safe(handler.request_deserializer, details.method)
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                _wrap_unary(handler.unary_unary), request_deserializer=decode,
                response_serializer=handler.response_serializer)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                _wrap_stream(handler.unary_stream), request_deserializer=decode,
                response_serializer=handler.response_serializer)
        return handler


__all__ = ["DecodeInterceptor", "find_bad_field"]
