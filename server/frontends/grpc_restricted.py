"""Restricted gRPC protocols (tritonserver --grpc-restricted-protocol): the group of every RPC, as
Triton's gRPC server registers them, and the servicer methods of restricted groups wrapped so that a
call without the group's metadata key and value ends at once with UNAVAILABLE "This protocol is
restricted, expecting header '<key>'" (server/protocol/restricted.py). Only restricted groups are
wrapped: an open group's calls go straight to the servicer, at no cost. A ModelStreamInfer stream
without the metadata is refused before any of its requests is read, as in Triton.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from server.protocol.restricted import Restriction, Restrictions, grpc_refusal

# servicer method -> group; `health_check` is grpc.health.v1.Health/Check, which Triton puts in "health"
RPC_GROUPS = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "health_check": "health",
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
    "SystemSharedMemoryStatus": "shared-memory",
    "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "ModelConfig": "model-config",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "ModelStatistics": "statistics",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}
_STREAMING = frozenset({"ModelStreamInfer"})

Unary = Callable[[Any, Any], Awaitable[Any]]
Streaming = Callable[[Any, Any], AsyncIterator[Any]]


def guard(servicer: object, restrictions: Restrictions) -> None:
    """Replace, on `servicer` (before its methods are registered), each method of a restricted group
    by one that refuses a call lacking the group's metadata."""
    for name, group in RPC_GROUPS.items():
        rule = restrictions.get(group)
        if rule is not None:
            method = getattr(servicer, name)
            setattr(servicer, name, _streaming(method, rule) if name in _STREAMING else _unary(method, rule))


def _carries(context: Any, rule: Restriction) -> bool:
    """Whether the call's first metadata entry under the key has exactly the value."""
    for key, value in context.invocation_metadata() or ():
        if key == rule.header:
            return bool(value == rule.value)
    return False


def _unary(method: Unary, rule: Restriction) -> Unary:
    refusal = grpc_refusal(rule)

    async def guarded(request: Any, context: Any) -> Any:
        if not _carries(context, rule):
            await context.abort(grpc.StatusCode.UNAVAILABLE, refusal)
        return await method(request, context)

    return guarded


def _streaming(method: Streaming, rule: Restriction) -> Streaming:
    refusal = grpc_refusal(rule)

    async def guarded(request_iterator: Any, context: Any) -> AsyncIterator[Any]:
        if not _carries(context, rule):
            await context.abort(grpc.StatusCode.UNAVAILABLE, refusal)
        async with contextlib.aclosing(method(request_iterator, context)) as answers:  # type: ignore[type-var]
            async for answer in answers:
                yield answer

    return guarded
