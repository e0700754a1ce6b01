"""The gRPC front end: `inference.GRPCInferenceService` (tritonclient's generated service) and the
standard `grpc.health.v1.Health` service over InferenceService, served by tcli's own HTTP/2 transport
(server/frontends/grpc_native, the default: a fraction of grpc.aio's CPU per call) or by a grpc.aio
server; both call the same servicer methods below.

Every RPC decodes its message with server/protocol/grpc_codec.py (inference) or
server/protocol/grpc_messages.py (the others), calls the core facade and encodes the answer; errors
become the gRPC status of their code (ErrorCode.grpc_status_name) with the core's message.
ModelStreamInfer answers each request on the stream: a decoupled model's responses as the model sends
them (`triton_final_response` on the last; its flags-only end only to requests that set
`triton_enable_empty_final_response`), other models' in request order, errors as `error_message`
without closing the stream; unary ModelInfer refuses decoupled models, as Triton does. Health's Check answers SERVING
while the server is ready, NOT_SERVING otherwise, whatever service is named, as Triton does.
RPCs of groups restricted by --grpc-restricted-protocol refuse calls without the group's metadata
(server/frontends/grpc_restricted.py).

Messages of up to INT32_MAX bytes are accepted and sent by default (Triton's limit), so real tensors
fit; `max_message_size` lowers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from grpc import aio
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from server.frontends.grpc_handler_steps import STREAM_INFER, HandlerSteps
from server.frontends.grpc_restricted import guard
from server.frontends.header_forward import NO_FORWARD, HeaderForward
from server.protocol import grpc_codec as codec
from server.protocol import grpc_messages as messages
from server.protocol.errors import ErrorCode, TritonError, unavailable
from server.protocol.grpc_parameters import model_version
from server.protocol.restricted import Restrictions
from server.protocol.shm import SharedMemoryRegistry, ShmSession
from server.protocol.tensors import SHM_DISABLED, ShmView
from server.protocol.trace import GRPC_SEND_END, GRPC_SEND_START, GRPC_WAITREAD_END, GRPC_WAITREAD_START

if TYPE_CHECKING:
    from server.frontends.grpc_native import NativeGrpcServerHandle
    from server.frontends.tls import ServerTls
    from server.protocol.trace import Trace
    from server.protocol.types import InferenceRequest
    from server.service import Admission, InferenceService

log = logging.getLogger("tcli.server.grpc")

HEALTH_SERVICE = "grpc.health.v1.Health"
# grpc.health.v1.HealthCheckResponse{status: SERVING=1 | NOT_SERVING=2}, encoded (field 1, varint)
_SERVING = b"\x08\x01"
_NOT_SERVING = b"\x08\x02"

_STATUS = {code: getattr(grpc.StatusCode, code.grpc_status_name) for code in ErrorCode}

T = TypeVar("T")
_Answer = tuple[Any, "TritonError | None"]  # a stream message, and the error it reports if any
DECOUPLED_MODEL_INFER = "ModelInfer RPC doesn't support models with decoupled transaction policy"


class GrpcFrontend(pb_grpc.GRPCInferenceServiceServicer):
    """The GRPCInferenceService servicer over one InferenceService."""

    def __init__(
        self,
        service: InferenceService,
        *,
        allow_client_shm: bool = False,
        shm_registry: SharedMemoryRegistry | None = None,
        restricted: Restrictions | None = None,
        header_forward: HeaderForward = NO_FORWARD,
    ) -> None:
        self.service = service
        self.header_forward = header_forward  # --grpc-header-forward-pattern
        self.allow_client_shm = allow_client_shm
        self._owns_shm = shm_registry is None
        self.shm = SharedMemoryRegistry() if shm_registry is None else shm_registry
        self._shm_view: ShmView | None = self.shm.view if allow_client_shm else None
        self.steps = HandlerSteps()  # Triton's handler lines; TRITONSERVER_DELAY_GRPC_PROCESS
        guard(self, restricted or {})  # --grpc-restricted-protocol: before the methods are registered

    # answers ---------------------------------------------------------------------------------------
    async def _answer(self, context: aio.ServicerContext, work: Callable[[], T]) -> T:
        """`work()`'s result, or the call aborted with the status of the error it raised."""
        try:
            return work()
        except TritonError as error:
            await context.abort(_STATUS[error.code], error.message)
        except Exception as exc:  # a bug still answers, and is logged with its traceback
            log.exception("unexpected error in a gRPC call")
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    async def _answer_async(self, context: aio.ServicerContext, work: Callable[[], Awaitable[T]]) -> T:
        try:
            return await work()
        except TritonError as error:
            await context.abort(_STATUS[error.code], error.message)
        except Exception as exc:
            log.exception("unexpected error in a gRPC call")
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    # health ----------------------------------------------------------------------------------------
    async def ServerLive(self, request: Any, context: aio.ServicerContext) -> Any:
        return pb.ServerLiveResponse(live=self.service.live())

    async def ServerReady(self, request: Any, context: aio.ServicerContext) -> Any:
        return pb.ServerReadyResponse(ready=self.service.ready())

    async def ModelReady(self, request: Any, context: aio.ServicerContext) -> Any:
        def work() -> Any:
            version = model_version(request.version)
            return messages.model_ready_response(self.service.model_ready(request.name, version))

        return await self._answer(context, work)

    async def health_check(self, request: bytes, context: aio.ServicerContext) -> bytes:
        return _SERVING if self.service.ready() else _NOT_SERVING

    # metadata and config ---------------------------------------------------------------------------
    async def ServerMetadata(self, request: Any, context: aio.ServicerContext) -> Any:
        return await self._answer(
            context, lambda: messages.server_metadata_response(self.service.server_metadata())
        )

    async def ModelMetadata(self, request: Any, context: aio.ServicerContext) -> Any:
        def work() -> Any:
            version = model_version(request.version)
            return messages.model_metadata_response(self.service.model_metadata(request.name, version))

        return await self._answer(context, work)

    async def ModelConfig(self, request: Any, context: aio.ServicerContext) -> Any:
        def work() -> Any:
            version = model_version(request.version)
            return messages.model_config_response(self.service.model_config(request.name, version))

        return await self._answer(context, work)

    async def ModelStatistics(self, request: Any, context: aio.ServicerContext) -> Any:
        def work() -> Any:
            version = model_version(request.version)
            return messages.statistics_response(self.service.statistics(request.name, version))

        return await self._answer(context, work)

    # inference -------------------------------------------------------------------------------------
    def _admission(self, message: Any) -> Admission:
        """The request's model, resolved once for the whole request (decoupled or not, then run)."""
        try:
            version = model_version(message.model_version)
        except TritonError:
            version = ""  # decoding fails with Triton's words for it, before anyone asks the admission
        return self.service.admission(message.model_name, version)

    def _session(self) -> ShmSession | None:
        """The shared memory one request uses: its regions are in use until session.release()."""
        return None if self._shm_view is None else self.shm.session()

    def _decode(
        self, message: Any, admission: Admission, shm: ShmView | None
    ) -> tuple[InferenceRequest, bool]:
        try:
            return codec.decode_infer_request(message, shm)
        except TritonError:
            # as in Triton, a request for a model that is not there says so, whatever else is wrong
            # (but a version it cannot read first)
            model_version(message.model_version)
            admission.require()
            raise

    async def ModelInfer(self, request: Any, context: aio.ServicerContext) -> Any:
        waited = time.monotonic_ns() if self.service.tracer.enabled else 0  # GRPC_WAITREAD_START, if traced
        if self.steps.delay_ms:  # TRITONSERVER_DELAY_GRPC_PROCESS: a call cancelled here never runs
            await self.steps.delay()
        self.steps.started()
        trace = None
        shm = self._session()
        try:
            admission = self._admission(request)
            if admission.decoupled:
                raise TritonError(ErrorCode.UNSUPPORTED, DECOUPLED_MODEL_INFER)
            infer_request, _ = self._decode(request, admission, shm)
            if self.header_forward.enabled:
                self.header_forward.apply(infer_request, context.invocation_metadata() or ())
            if waited:
                trace = self._trace(infer_request, context, waited)
            response = await self.service.infer(infer_request, admission)
            if trace is None:
                return codec.encode_infer_response(response, infer_request.outputs, shm)
            sending = time.monotonic_ns()
            encoded = codec.encode_infer_response(response, infer_request.outputs, shm)
            trace.sent(GRPC_SEND_START, GRPC_SEND_END, sending)
            return encoded
        except asyncio.CancelledError:  # the client went away (or the deadline passed): the call ends
            self.steps.cancelled_issued()
            raise
        except TritonError as error:
            await context.abort(_STATUS[error.code], error.message)
        except Exception as exc:
            log.exception("unexpected error in ModelInfer")
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            if shm is not None:
                shm.release()
            if trace is not None:
                trace.finish()

    def _trace(self, request: InferenceRequest, context: aio.ServicerContext, waited: int) -> Trace | None:
        """The request's trace when it is sampled: the client's traceparent metadata continued, its
        wait and read stamped (from the servicer's start: the transport has read the message by then)."""
        parent = next((str(v) for k, v in (context.invocation_metadata() or ()) if k == "traceparent"), "")
        return self.service.sample_trace(
            request, parent, ((GRPC_WAITREAD_START, waited), (GRPC_WAITREAD_END, 0))
        )

    async def _answers(
        self, message: Any, admission: Admission, context: aio.ServicerContext
    ) -> AsyncGenerator[_Answer, None]:
        """The stream messages answering one ModelInferRequest, as the model sends its responses."""
        waited = time.monotonic_ns() if self.service.tracer.enabled else 0
        trace = None
        shm = self._session()
        try:
            request, empty_final = self._decode(message, admission, shm)
            if self.header_forward.enabled:
                self.header_forward.apply(request, context.invocation_metadata() or ())
            if waited:
                trace = self._trace(request, context, waited)
            async with contextlib.aclosing(self.service.infer_stream(request, admission)) as items:
                async for item in items:
                    if item.response is not None:
                        sending = 0 if trace is None else time.monotonic_ns()
                        encoded = codec.encode_infer_response(item.response, request.outputs, shm)
                        if trace is not None:
                            trace.sent(GRPC_SEND_START, GRPC_SEND_END, sending)
                        yield codec.stream_response(encoded, item.final), None
                    elif item.error is not None:
                        yield (
                            codec.stream_error(
                                item.error.message,
                                message.id,
                                message.model_name,
                                message.model_version,
                                item.final,
                            ),
                            item.error,
                        )
                    elif empty_final and admission.decoupled:  # the flags-only final of a decoupled model
                        yield (
                            codec.stream_empty_final(message.id, message.model_name, message.model_version),
                            None,
                        )
        except TritonError as error:
            yield codec.stream_error(error.message, message.id), error
        except Exception as exc:
            log.exception("unexpected error in ModelStreamInfer")
            failure = TritonError(ErrorCode.INTERNAL, f"internal error: {type(exc).__name__}: {exc}")
            yield codec.stream_error(failure.message, message.id), failure
        finally:
            if shm is not None:
                shm.release()
            if trace is not None:
                trace.finish()

    async def ModelStreamInfer(
        self, request_iterator: AsyncIterator[Any], context: aio.ServicerContext
    ) -> AsyncIterator[Any]:
        """Reads requests and starts each as it arrives (so a sequence's requests reach the core in
        stream order). Responses of decoupled models are written as the model sends them; those of
        other models in request order among themselves, as Triton does. An error is written as the
        stream message's `error_message` and the stream goes on, unless the client opened the stream
        with the header `triton_grpc_error: true`: then the first error ends the call with its gRPC
        status. A client that goes away cancels its requests still answering."""
        loop = asyncio.get_running_loop()
        out: asyncio.Queue[_Answer | None] = asyncio.Queue()
        ordered: deque[asyncio.Future[list[_Answer]]] = deque()  # answers of default models, in order
        tasks: set[asyncio.Task[None]] = set()
        reading = True
        grpc_error = any(
            key == "triton_grpc_error" and str(value).lower() == "true"
            for key, value in (context.invocation_metadata() or ())
        )

        def flush() -> None:
            while ordered and ordered[0].done():
                slot = ordered.popleft()
                if not slot.cancelled():  # cancelled: the stream is going away
                    for answer in slot.result():
                        out.put_nowait(answer)

        def finished(task: asyncio.Task[None]) -> None:
            tasks.discard(task)
            if not reading and not tasks:
                out.put_nowait(None)

        async def decoupled(message: Any, admission: Admission) -> None:
            async with contextlib.aclosing(self._answers(message, admission, context)) as answers:
                async for answer in answers:
                    out.put_nowait(answer)

        async def in_order(message: Any, admission: Admission, slot: asyncio.Future[list[_Answer]]) -> None:
            try:
                async with contextlib.aclosing(self._answers(message, admission, context)) as answers:
                    slot.set_result([answer async for answer in answers])
            finally:
                if not slot.done():
                    slot.cancel()
                flush()

        async def read() -> None:
            nonlocal reading
            try:
                async for message in request_iterator:
                    admission = self._admission(message)
                    if admission.decoupled:
                        task = loop.create_task(decoupled(message, admission))
                    else:
                        slot: asyncio.Future[list[_Answer]] = loop.create_future()
                        ordered.append(slot)
                        task = loop.create_task(in_order(message, admission, slot))
                    tasks.add(task)
                    task.add_done_callback(finished)
            finally:
                reading = False
                if not tasks:
                    out.put_nowait(None)

        self.steps.stream_started()
        reader = loop.create_task(read())
        try:
            while True:
                answer = await out.get()
                if answer is None:
                    break
                message, error = answer
                if error is not None and grpc_error:
                    await context.abort(_STATUS[error.code], error.message)
                yield message
            await reader  # re-raises a failed read (the client went away): the call ends
        except asyncio.CancelledError:  # the client went away: its requests still running are cancelled
            if tasks:
                self.steps.cancelled_issued(STREAM_INFER, len(tasks))
            raise
        finally:
            reader.cancel()
            for task in list(tasks):
                task.cancel()

    # repository ------------------------------------------------------------------------------------
    async def RepositoryIndex(self, request: Any, context: aio.ServicerContext) -> Any:
        def work() -> Any:
            _require_no_repository(request.repository_name)
            return messages.repository_index_response(self.service.repository_index(request.ready))

        return await self._answer(context, work)

    async def RepositoryModelLoad(self, request: Any, context: aio.ServicerContext) -> Any:
        async def work() -> Any:
            _require_no_repository(request.repository_name)
            config, files = messages.load_parameters(request)
            await self.service.load(request.model_name, config, files)
            return pb.RepositoryModelLoadResponse()

        return await self._answer_async(context, work)

    async def RepositoryModelUnload(self, request: Any, context: aio.ServicerContext) -> Any:
        async def work() -> Any:
            _require_no_repository(request.repository_name)
            dependents = messages.unload_dependents(request)
            await self.service.unload(request.model_name, dependents)
            return pb.RepositoryModelUnloadResponse()

        return await self._answer_async(context, work)

    # shared memory ---------------------------------------------------------------------------------
    async def SystemSharedMemoryStatus(self, request: Any, context: aio.ServicerContext) -> Any:
        return await self._answer(
            context, lambda: messages.system_shm_status_response(self.shm.status(request.name))
        )

    async def SystemSharedMemoryRegister(self, request: Any, context: aio.ServicerContext) -> Any:
        def work() -> Any:
            if not self.allow_client_shm:
                raise unavailable(SHM_DISABLED)
            self.shm.register(request.name, request.key, request.offset, request.byte_size)
            return pb.SystemSharedMemoryRegisterResponse()

        return await self._answer(context, work)

    async def SystemSharedMemoryUnregister(self, request: Any, context: aio.ServicerContext) -> Any:
        def work() -> Any:
            self.shm.unregister(request.name)
            return pb.SystemSharedMemoryUnregisterResponse()

        return await self._answer(context, work)

    async def CudaSharedMemoryStatus(self, request: Any, context: aio.ServicerContext) -> Any:
        return await self._answer(context, lambda: messages.cuda_shm_status(request.name))

    async def CudaSharedMemoryRegister(self, request: Any, context: aio.ServicerContext) -> Any:
        def work() -> Any:
            raise messages.cuda_shm_register_error(request.name)

        return await self._answer(context, work)

    async def CudaSharedMemoryUnregister(self, request: Any, context: aio.ServicerContext) -> Any:
        return pb.CudaSharedMemoryUnregisterResponse()  # nothing can be registered without a GPU

    # logging and trace -----------------------------------------------------------------------------
    async def LogSettings(self, request: Any, context: aio.ServicerContext) -> Any:
        def work() -> Any:
            changes = messages.log_settings_changes(request)
            return messages.log_settings_response(self.service.update_log_settings(changes))

        return await self._answer(context, work)

    async def TraceSetting(self, request: Any, context: aio.ServicerContext) -> Any:
        def work() -> Any:
            model = request.model_name
            self.service.trace_model(model)
            if request.settings:
                settings = self.service.update_trace_settings(messages.trace_settings_changes(request), model)
            else:
                settings = self.service.trace_settings(model)
            return messages.trace_settings_response(settings)

        return await self._answer(context, work)

    def close(self) -> None:
        self.steps.close()
        if self._owns_shm:
            self.shm.close()


def _require_no_repository(name: str) -> None:
    if name:
        raise TritonError(ErrorCode.UNSUPPORTED, "'repository_name' specification is not supported")


def health_handler(frontend: GrpcFrontend) -> grpc.GenericRpcHandler:
    """grpc.health.v1.Health with its Check method (Watch is UNIMPLEMENTED, as in Triton), on raw
    bytes: the two messages are one field each."""
    return grpc.method_handlers_generic_handler(
        HEALTH_SERVICE, {"Check": grpc.unary_unary_rpc_method_handler(frontend.health_check)}
    )


# serving ---------------------------------------------------------------------------------------------
@dataclass
class GrpcServerHandle:
    """A running gRPC server: its bound `port`, and `shutdown()` (stop accepting, let calls in flight
    finish for up to `grace` seconds, close)."""

    port: int
    server: aio.Server
    frontend: GrpcFrontend
    grace: float = 5.0

    async def shutdown(self) -> None:
        await self.server.stop(self.grace)
        self.frontend.close()


def server_options(max_message_size: int = codec.MAX_GRPC_MESSAGE_SIZE) -> list[tuple[str, Any]]:
    return [
        ("grpc.max_receive_message_length", max_message_size),
        ("grpc.max_send_message_length", max_message_size),
        ("grpc.so_reuseport", 0),  # a port in use is an error, not shared silently (Triton's default)
    ]


GRPC_IMPLEMENTATIONS = ("native", "grpcio")


async def serve_grpc(
    service: InferenceService,
    host: str,
    port: int,
    *,
    allow_client_shm: bool = False,
    shm_registry: SharedMemoryRegistry | None = None,
    max_message_size: int = codec.MAX_GRPC_MESSAGE_SIZE,
    implementation: str = "native",
    reuse_port: bool = False,
    restricted: Restrictions | None = None,
    tls: ServerTls | None = None,
    max_concurrent_streams: int = 1024,
    read_timeout: float = 30.0,
    header_forward: HeaderForward = NO_FORWARD,
) -> GrpcServerHandle | NativeGrpcServerHandle:
    """Serve GRPCInferenceService and Health for `service` on host:port (0: any free port; the handle
    tells which) from the running event loop. `allow_client_shm` enables client system shared memory
    (--allow-client-shm), kept in `shm_registry` when given (to share regions with the HTTP front end).
    `implementation`: "native" (server/frontends/grpc_native: HTTP/2 on the event loop, the fast one)
    or "grpcio" (grpc.aio). Both call the same GrpcFrontend methods. `reuse_port`
    (--reuse-grpc-port) lets several servers share the port; `tls` (--grpc-use-ssl) serves TLS.
    `max_message_size` bounds messages both ways, `max_concurrent_streams` a connection's calls at
    once; with the native transport, a connection that stalls inside a frame (or before its preface)
    closes after `read_timeout` seconds. `restricted`: the groups --grpc-restricted-protocol
    restricts; `header_forward` the metadata --grpc-header-forward-pattern passes to the model.
    Raises OSError when the address cannot be bound."""
    if implementation not in GRPC_IMPLEMENTATIONS:
        raise ValueError(f"unknown gRPC implementation {implementation!r}: use native or grpcio")
    frontend = GrpcFrontend(
        service,
        allow_client_shm=allow_client_shm,
        shm_registry=shm_registry,
        restricted=restricted,
        header_forward=header_forward,
    )
    if implementation == "native":
        from server.frontends.grpc_native import serve_native

        native = await serve_native(
            lambda table: pb_grpc.add_GRPCInferenceServiceServicer_to_server(frontend, table),
            frontend,
            host,
            port,
            max_message_size=max_message_size,
            generic_handlers=[health_handler(frontend)],
            reuse_port=reuse_port,
            ssl_context=None if tls is None else tls.context,
            max_concurrent_streams=max_concurrent_streams,
            read_timeout=read_timeout,
        )
        frontend.steps.posted()
        return native
    options = [
        *server_options(max_message_size),
        ("grpc.so_reuseport", 1 if reuse_port else 0),
        ("grpc.max_concurrent_streams", max_concurrent_streams),
    ]
    server = aio.server(options=options)
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(frontend, server)
    server.add_generic_rpc_handlers((health_handler(frontend),))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        if tls is None:
            bound = server.add_insecure_port(address)
        else:
            bound = server.add_secure_port(address, tls.grpc_credentials())
    except RuntimeError as exc:
        raise OSError(f"gRPC server could not bind {address}: {exc}") from None
    if bound == 0:
        raise OSError(f"gRPC server could not bind {address}")
    await server.start()
    frontend.steps.posted()
    return GrpcServerHandle(bound, server, frontend)
