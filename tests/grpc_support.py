"""Reading what a gRPC error names: the reason and the field of its rich status."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status


def details(err: grpc.aio.AioRpcError) -> tuple[str, str]:
    """(ErrorInfo.reason, BadRequest field) from an error's rich status."""
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    reason, field = "", ""
    for d in status.details if status else []:
        if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            d.Unpack(info)
            reason = info.reason
        elif d.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            d.Unpack(bad)
            field = bad.field_violations[0].field
    return reason, field
