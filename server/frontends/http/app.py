"""The KServe v2 REST front end with Triton's extensions: a raw ASGI app over InferenceService, served by
tcli's HTTP/1.1 server (server/frontends/http/server.py, httptools on uvloop), JSON by orjson.

Routes, methods and answers follow Triton's HTTP server (server/src/http_server.cc). They are the table
`ROUTES` at the end of this module (`Route`, server/frontends/http/routes.py): each names its methods,
its path, its handler below and its restricted-API group. A path no route matches is 404
{"error":"Not Found"}; a route's path with another method is 405 {"error":"Method Not Allowed"}. A
route of a group --http-restricted-api restricts answers 403 before anything else to a request
without the group's header (server/frontends/http/restricted.py).
Errors are {"error": message} with the HTTP status of the error's code (`_error_answer`).
Inference request bodies may be gzip/deflate compressed; inference responses are compressed when the
client's Accept-Encoding asks for it (Triton compresses nothing else).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

import orjson

from server.frontends.header_forward import NO_FORWARD, HeaderForward
from server.frontends.http.asgi_io import (
    JSON,
    Disconnected,
    Receive,
    Scope,
    Send,
    cancelled_on_disconnect,
    lifespan,
    not_allowed,
    not_found,
    read_body,
    respond,
    unless_disconnected,
)
from server.frontends.http.content import compress, decompress, response_encoding, too_large
from server.frontends.http.direct import InferHeaders
from server.frontends.http.restricted import HttpRestrictions, Refused
from server.frontends.http.routes import Route, RouteTable
from server.protocol import json_messages
from server.protocol.errors import ErrorCode, TritonError, invalid_arg, unavailable, unsupported
from server.protocol.generate_codec import GENERATE_ONE_RESPONSE, decode_generate, encode_generate
from server.protocol.json_binary import decode_raw_request
from server.protocol.json_codec import DEFAULT_MAX_INPUT_SIZE, decode_request, parse_header_length, parse_json
from server.protocol.json_response import encode_response
from server.protocol.restricted import Restrictions
from server.protocol.shm import SharedMemoryRegistry
from server.protocol.tensors import SHM_DISABLED, ShmView
from server.protocol.trace import HTTP_RECV_END, HTTP_RECV_START, HTTP_SEND_END, HTTP_SEND_START

if TYPE_CHECKING:
    from server.service import InferenceService, StreamResponse

ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
T = TypeVar("T")

log = logging.getLogger("tcli.server.http")

_SSE = (b"content-type", b"text/event-stream; charset=utf-8")
_TEXT = (b"content-type", b"text/plain")
_OCTET = (b"content-type", b"application/octet-stream")

_LOG_KEYS = ("log_file", "log_info", "log_warning", "log_error", "log_verbose_level", "log_format")
_TRACE_KEYS = ("trace_file", "trace_level", "trace_rate", "trace_count", "log_frequency", "trace_mode")


class _HttpError(TritonError):
    """A TritonError whose answer carries extra response headers."""

    def __init__(self, code: ErrorCode, message: str, headers: list[tuple[bytes, bytes]]) -> None:
        super().__init__(code, message)
        self.headers = headers


def _error_body(message: str) -> bytes:
    return orjson.dumps({"error": message})


class HttpFrontend:
    """The ASGI application; `create_http_app` builds it."""

    def __init__(
        self,
        service: InferenceService,
        max_input_size: int,
        allow_client_shm: bool,
        shm_registry: SharedMemoryRegistry | None = None,
        restricted: Restrictions | None = None,
        header_forward: HeaderForward = NO_FORWARD,
    ) -> None:
        self.service = service
        self.header_forward = header_forward  # --http-header-forward-pattern
        self._restrictions = HttpRestrictions(restricted or {})
        self.restricted_inference = self._restrictions.inference
        self.max_input_size = max_input_size
        self.allow_client_shm = allow_client_shm
        self._owns_shm = shm_registry is None
        self.shm = SharedMemoryRegistry() if shm_registry is None else shm_registry
        self._shm_view: ShmView | None = self.shm.view if allow_client_shm else None
        self.tracer = service.tracer

    # ASGI ------------------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await lifespan(receive, send)
            return
        try:
            await self._route(scope, receive, send)
        except Disconnected:
            return
        except Exception as exc:
            status, headers, body = _error_answer(exc, scope.get("method", ""), scope.get("path", ""))
            await respond(send, status, body, headers)

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        found = ROUTES.match(raw.decode("latin-1") if raw else scope["path"])
        if found is None:
            return await not_found(send)
        route, parameters = found
        self._restrictions.check(scope["headers"], route.group)
        if route.limit_head:
            # a request whose declared size is over the limit (a load request's files, say) is
            # refused from its head, before its body is read, as an inference request is
            declared = _content_length(scope["headers"])
            if declared > self.max_input_size:
                raise too_large(declared, self.max_input_size, json_only=True)
        method: str = scope["method"]
        if method not in route.methods:
            return await not_allowed(send)
        await route.handler(self, scope, receive, send, method, *parameters)

    # inference -------------------------------------------------------------------------------------
    async def _infer(
        self, scope: Scope, receive: Receive, send: Send, method: str, model: str, version: str
    ) -> None:
        headers = InferHeaders.of(scope["headers"])
        limit = self.max_input_size
        if headers.content_length > limit:
            raise too_large(headers.content_length, limit, headers.header_length is None)
        body = await read_body(receive, limit, headers.header_length is None)
        try:
            payload, response_headers = await unless_disconnected(
                receive, self._infer_body(model, version, headers, body)
            )
        except BaseException:
            if headers.trace is not None:  # a failed request's trace is written too, as Triton's
                headers.trace.finish()
            raise
        trace = headers.trace
        sending = 0 if trace is None else time.monotonic_ns()
        await respond(send, 200, payload, response_headers)
        if trace is not None:
            trace.sent(HTTP_SEND_START, HTTP_SEND_END, sending)
            trace.finish()

    def infer_target(self, path: bytes) -> tuple[str, str] | None:
        """(model, version) when `path` (a request target without query) is POST-able inference."""
        if not path.startswith(b"/v2/models/") or not path.endswith(b"/infer"):
            return None
        found = _INFER_PATH.fullmatch(path.decode("latin-1"))
        if found is None:
            return None
        model, version = found.group(1), found.group(2) or ""
        return (unquote(model) if "%" in model else model), version

    async def infer_direct(
        self, model: str, version: str, headers: InferHeaders, body: bytes | bytearray
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """The whole answer (status, headers without content-length, body) to an inference request
        whose body was read whole and within the size limit, outside ASGI: the HTTP protocol's fast
        path (http_fast_path). Answers errors as __call__ does; never raises."""
        try:
            payload, response_headers = await self._infer_body(model, version, headers, body)
            return 200, response_headers, payload
        except Exception as exc:
            return _error_answer(exc, "POST", f"/v2/models/{model}/infer")

    async def _infer_body(
        self, model: str, version: str, headers: InferHeaders, body: bytes | bytearray
    ) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        if self._shm_view is None:
            return await self._infer_shm(model, version, headers, body, None)
        session = self.shm.session()  # the regions the request names are in use until it is answered
        try:
            return await self._infer_shm(model, version, headers, body, session)
        finally:
            session.release()

    async def _infer_shm(
        self, model: str, version: str, headers: InferHeaders, body: bytes | bytearray, shm: ShmView | None
    ) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        limit = self.max_input_size
        received = time.monotonic_ns() if self.tracer.enabled else 0  # HTTP_RECV_END, if traced
        if headers.content_encoding and headers.content_encoding != b"identity":
            encoding = headers.content_encoding.decode("latin-1").strip().lower()
            if encoding not in ("gzip", "deflate"):
                raise _HttpError(
                    ErrorCode.UNSUPPORTED,
                    "Unsupported compression type",
                    [(b"accept-encoding", b"gzip, deflate")],
                )
            body = decompress(body, encoding, limit)

        service = self.service
        admission = service.admission(model, version)  # the model, resolved once for the request
        header_value = headers.header_length
        try:
            header_length = None if header_value is None else parse_header_length(header_value, len(body))
            if header_length == 0:
                request, binary_default = decode_raw_request(body, model, version, admission.config)
            else:
                request, binary_default = decode_request(
                    body,
                    model,
                    version,
                    header_length=header_length,
                    max_input_size=limit,
                    shm=shm,
                )
        except TritonError:
            admission.require()  # as in Triton, a request for a model that is not there says so
            raise
        if admission.decoupled:
            raise TritonError(
                ErrorCode.UNSUPPORTED,
                "HTTP end point doesn't support models with decoupled transaction policy",
            )
        if self.header_forward.enabled:
            self.header_forward.apply(request, headers.all)
        if received:
            stamps = ((HTTP_RECV_START, headers.began_ns or received), (HTTP_RECV_END, received))
            headers.trace = service.sample_trace(request, headers.traceparent.decode("latin-1"), stamps)
        response = await service.infer(request, admission)
        payload, json_length = encode_response(response, request.outputs, binary_default, shm=shm)
        if json_length is None:
            response_headers = [JSON]
        else:
            response_headers = [_OCTET, (b"inference-header-content-length", str(json_length).encode())]
        if headers.accept_encoding:
            chosen = response_encoding(headers.accept_encoding.decode("latin-1"))
            if chosen != "identity":
                payload = compress(payload, chosen)
                response_headers.append((b"content-encoding", chosen.encode()))
        return payload, response_headers

    # server and models -----------------------------------------------------------------------------
    async def _server_metadata(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        await self._json(send, self.service.server_metadata())

    async def _live(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        await respond(send, 200 if self.service.live() else 400, b"", [_TEXT])

    async def _ready(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        await respond(send, 200 if self.service.ready() else 400, b"", [_TEXT])

    async def _model_metadata(
        self, scope: Scope, receive: Receive, send: Send, method: str, model: str, version: str
    ) -> None:
        await self._json(send, self.service.model_metadata(model, version))

    async def _model_ready(
        self, scope: Scope, receive: Receive, send: Send, method: str, model: str, version: str
    ) -> None:
        if self.service.model_ready(model, version).ready:
            return await respond(send, 200, b"", [_TEXT])
        await respond(send, 400, b'{"error":"Model version not ready"}', [_TEXT])

    async def _model_config(
        self, scope: Scope, receive: Receive, send: Send, method: str, model: str, version: str
    ) -> None:
        await self._json(send, self.service.model_config(model, version))

    async def _statistics(
        self, scope: Scope, receive: Receive, send: Send, method: str, model: str = "", version: str = ""
    ) -> None:
        await self._json(send, self.service.statistics(model, version))

    # generate extension ----------------------------------------------------------------------------
    async def _generate(
        self, scope: Scope, receive: Receive, send: Send, method: str, model: str, version: str
    ) -> None:
        """POST .../generate: exactly one response, as JSON (see `decode_generate` and
        `encode_generate` for the JSON forms)."""
        answers = await self._generate_answers(receive, model, version)
        async with contextlib.aclosing(answers):
            items = [item async for item in answers if item.response is not None or item.error is not None]
        if len(items) != 1:
            return await respond(send, 200, _error_body(GENERATE_ONE_RESPONSE))
        if items[0].error is not None:
            return await respond(send, 400, _error_body(items[0].error.message))
        assert items[0].response is not None
        await respond(send, 200, encode_generate(items[0].response))

    async def _generate_events(
        self, scope: Scope, receive: Receive, send: Send, method: str, model: str, version: str
    ) -> None:
        """POST .../generate_stream: every response as a server-sent event."""
        await self._generate_stream(receive, send, await self._generate_answers(receive, model, version))

    async def _generate_answers(
        self, receive: Receive, model: str, version: str
    ) -> AsyncGenerator[StreamResponse, None]:
        # the model's inputs, or Triton's error for a model it does not have, before the body is read
        batching, schema = self.service.input_schema(self.service.admission(model, version))
        body = await read_body(receive, self.max_input_size, True)
        request = decode_generate(body, model, version, batching, schema)
        # the body may have been slow to come: the model is resolved afresh as the request starts,
        # so that a model unloaded meanwhile is not run in its retired version
        return self.service.infer_stream(request)

    async def _generate_stream(
        self, receive: Receive, send: Send, answers: AsyncGenerator[StreamResponse, None]
    ) -> None:
        """Server-sent events, one `data: {...}` per response; the status is fixed by the first one
        (400 when it is an error). A client that disconnects cancels the request."""
        started = False
        async with cancelled_on_disconnect(receive):
            try:
                async with contextlib.aclosing(answers):
                    first = True
                    async for item in answers:
                        if item.response is not None:
                            event = encode_generate(item.response)
                        elif item.error is not None:
                            event = _error_body(item.error.message)
                        else:
                            continue
                        if first:
                            first = False
                            status = 400 if item.error is not None else 200
                            await send({"type": "http.response.start", "status": status, "headers": [_SSE]})
                            started = True
                        await send(
                            {
                                "type": "http.response.body",
                                "body": b"data: " + event + b"\n\n",
                                "more_body": True,
                            }
                        )
                if not started:
                    await send({"type": "http.response.start", "status": 200, "headers": [_SSE]})
                await send({"type": "http.response.body", "body": b""})
            except TritonError as error:
                if started:  # the events already began: the error becomes one more
                    await send(
                        {
                            "type": "http.response.body",
                            "body": b"data: " + _error_body(error.message) + b"\n\n",
                        }
                    )
                else:
                    raise

    # repository ------------------------------------------------------------------------------------
    async def _repository_index(
        self, scope: Scope, receive: Receive, send: Send, method: str, repository: str
    ) -> None:
        document = await self._optional_json(receive)
        ready = document.get("ready", False)  # a repository name is accepted and ignored, as in Triton
        if type(ready) is not bool:
            raise invalid_arg("Invalid value for 'ready': expected a boolean")
        await self._json(send, self.service.repository_index(ready))

    async def _repository_model(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        method: str,
        repository: str,
        model: str,
        action: str,
    ) -> None:
        document = await self._optional_json(receive)
        if repository:
            raise unsupported("'repository_name' specification is not supported")
        params = document.get("parameters", {})
        if type(params) is not dict:
            raise invalid_arg("Unable to parse 'parameters': attempt to get members for non-object")
        if action == "load":
            config, files = json_messages.load_parameters(params)
            await self.service.load(model, config, files)
        else:
            dependents = params.get("unload_dependents", False)
            if type(dependents) is not bool:
                raise invalid_arg(
                    "Unable to parse 'unload_dependents': attempt to access JSON non-boolean as boolean"
                )
            await self.service.unload(model, dependents)
        await respond(send, 200, b"")

    # logging and trace -----------------------------------------------------------------------------
    async def _logging(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        if method == "GET":
            return await self._json(send, self.service.update_log_settings({}))
        document = parse_json(await read_body(receive, self.max_input_size, True))
        changes = {}
        if type(document) is dict:  # Triton ignores unknown keys, nulls and non-object bodies
            changes = {k: document[k] for k in _LOG_KEYS if document.get(k) is not None}
        await self._json(send, self.service.update_log_settings(changes))

    async def _trace(self, scope: Scope, receive: Receive, send: Send, method: str, model: str = "") -> None:
        self.service.trace_model(model)
        if method == "GET":
            return await self._json(send, self.service.trace_settings(model))
        document = parse_json(await read_body(receive, self.max_input_size, True))
        changes: dict[str, Any] = {}
        if type(document) is dict:  # unknown keys are ignored, as in Triton
            for key in _TRACE_KEYS:
                if key not in document:
                    continue
                value = document[key]
                if key == "trace_level":
                    if value is not None and (
                        type(value) is not list or any(type(v) is not str for v in value)
                    ):
                        raise invalid_arg("Unable to parse 'trace_level': expected an array of strings")
                elif value is not None and type(value) is not str:
                    raise invalid_arg(f"Unable to parse '{key}': attempt to access JSON non-string as string")
                changes[key] = value
        await self._json(send, self.service.update_trace_settings(changes, model))

    # shared memory ---------------------------------------------------------------------------------
    async def _system_shm(
        self, scope: Scope, receive: Receive, send: Send, method: str, region: str, action: str
    ) -> None:
        if action == "status":
            return await self._json(send, self.shm.status(region))
        if action == "unregister":
            self.shm.unregister(region)
            return await respond(send, 200, b"")
        if not region:
            raise invalid_arg("'region name' is necessary to register system shared memory region")
        if not self.allow_client_shm:
            raise unavailable(SHM_DISABLED)
        document = parse_json(await read_body(receive, self.max_input_size, True))
        if type(document) is not dict:
            document = {}
        if "key" not in document:
            raise invalid_arg("Shared memory register request has no 'key' field")
        key = document["key"]
        if type(key) is not str:
            raise invalid_arg("Unable to parse 'key': attempt to access JSON non-string as string")
        offset = document.get("offset", 0)
        if "byte_size" not in document:
            raise invalid_arg("Shared memory register request has no 'byte_size' field")
        byte_size = document["byte_size"]
        for field, value in (("offset", offset), ("byte_size", byte_size)):
            if type(value) is not int or value < 0:
                raise invalid_arg(
                    f"Unable to parse '{field}': attempt to access JSON non-unsigned-integer as "
                    "unsigned-integer"
                )
        self.shm.register(region, key, offset, byte_size)
        await respond(send, 200, b"")

    async def _cuda_shm(
        self, scope: Scope, receive: Receive, send: Send, method: str, region: str, action: str
    ) -> None:
        if action == "status":
            if region:
                raise TritonError(
                    ErrorCode.NOT_FOUND, f"Unable to find cuda shared memory region: '{region}'"
                )
            return await self._json(send, [])
        if action == "unregister":
            return await respond(send, 200, b"")
        if not region:
            raise invalid_arg("'region name' is necessary to register cuda shared memory region")
        raise unsupported(f"failed to register CUDA shared memory region: '{region}', GPUs not supported")

    # helpers ---------------------------------------------------------------------------------------
    async def _json(self, send: Send, message: Any) -> None:
        await respond(send, 200, json_messages.encode(message))

    async def _optional_json(self, receive: Receive) -> dict[str, Any]:
        """An optional JSON object body (an empty body is {}); anything but an object counts as {}."""
        body = await read_body(receive, self.max_input_size, True)
        if not body:
            return {}
        document = parse_json(body, any_depth=True)
        return document if type(document) is dict else {}

    def close(self) -> None:
        if self._owns_shm:
            self.shm.close()


def _content_length(headers: list[tuple[bytes, bytes]]) -> int:
    """The declared Content-Length, -1 when there is none (a chunked body, or no body)."""
    for key, value in headers:
        if key == b"content-length":
            return int(value) if value.isdigit() else -1
    return -1


def _error_answer(exc: Exception, method: str, path: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The answer (status, headers, body) to a request that failed with `exc`: the HTTP status of a
    TritonError's code with {"error": message}; a restricted API's refusal, 403 with its text; anything
    else is a bug, answered 500 as JSON and logged with its traceback."""
    if isinstance(exc, TritonError):
        headers = [JSON, *exc.headers] if isinstance(exc, _HttpError) else [JSON]
        return exc.code.http_status, headers, _error_body(exc.message)
    if isinstance(exc, Refused):
        return 403, [_TEXT], exc.body
    log.error("unexpected error handling %s %s", method, path, exc_info=exc)
    return 500, [JSON], _error_body(f"internal error: {type(exc).__name__}: {exc}")


def create_http_app(
    service: InferenceService,
    *,
    max_input_size: int = DEFAULT_MAX_INPUT_SIZE,
    allow_client_shm: bool = False,
    shm_registry: SharedMemoryRegistry | None = None,
    restricted: Restrictions | None = None,
    header_forward: HeaderForward = NO_FORWARD,
) -> HttpFrontend:
    """The ASGI app of the KServe v2 REST API over `service`. `max_input_size` bounds request bodies
    (tritonserver --http-max-input-size); `allow_client_shm` enables client system shared memory
    (--allow-client-shm), in `shm_registry` if given (to share the regions with another front end);
    `restricted` the groups --http-restricted-api restricts, `header_forward` the headers
    --http-header-forward-pattern passes to the model."""
    return HttpFrontend(service, max_input_size, allow_client_shm, shm_registry, restricted, header_forward)


_MODEL = r"/v2/models/([^/]++)(?:/versions/([0-9]+))?"  # a model, and a version when one is named
_SYSTEM_SHM = r"/v2/systemsharedmemory(?:/region/([^/]++))?"
_CUDA_SHM = r"/v2/cudasharedmemory(?:/region/([^/]++))?"
_REPOSITORY = r"/v2/repository(?:/([^/]++))?"
_GET, _POST, _GET_POST = ("GET",), ("POST",), ("GET", "POST")
_REPO = "model-repository"
_F = HttpFrontend

# Triton's routes (server/src/http_server.cc), first match wins: methods, path, handler, restricted group
ROUTES = RouteTable(
    (
        Route(_GET, r"/v2/models/stats", _F._statistics, "statistics"),
        Route(_POST, _MODEL + "/infer", _F._infer, "inference"),
        Route(_POST, _MODEL + "/generate", _F._generate, "inference"),
        Route(_POST, _MODEL + "/generate_stream", _F._generate_events, "inference"),
        Route(_GET, _MODEL + "/ready", _F._model_ready, "health"),
        Route(_GET, _MODEL + "/config", _F._model_config, "model-config"),
        Route(_GET, _MODEL + "/stats", _F._statistics, "statistics"),
        Route(_GET_POST, r"/v2/models/([^/]++)/trace/setting", _F._trace, "trace"),  # no per-version one
        Route(_GET, _MODEL, _F._model_metadata, "metadata"),
        Route(_GET_POST, r"/v2/logging", _F._logging, "logging"),
        Route(_GET, r"/v2", _F._server_metadata, "metadata"),
        Route(_GET, r"/v2/health/live", _F._live, "health"),
        Route(_GET, r"/v2/health/ready", _F._ready, "health"),
        Route(_GET, _SYSTEM_SHM + "/(status)", _F._system_shm, "shared-memory"),
        Route(_POST, _SYSTEM_SHM + "/(register|unregister)", _F._system_shm, "shared-memory"),
        Route(_GET, _CUDA_SHM + "/(status)", _F._cuda_shm, "shared-memory"),
        Route(_POST, _CUDA_SHM + "/(register|unregister)", _F._cuda_shm, "shared-memory"),
        Route(_POST, _REPOSITORY + "/index", _F._repository_index, _REPO, limit_head=True),
        Route(_POST, _REPOSITORY + "/models/([^/]++)/(load|unload)", _F._repository_model, _REPO, True),
        Route(_GET_POST, r"/v2/trace/setting", _F._trace, "trace"),
    )
)
_INFER_PATH = re.compile(_MODEL + "/infer")  # the fast path's one route (http_fast_path)
