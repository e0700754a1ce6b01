"""The OpenAI-compatible API as an ASGI app over InferenceService, served by tcli's HTTP/1.1 server on
its own port (`tcli serve --openai-port N`), beside the KServe HTTP and gRPC front ends:

- GET /v1/models, GET /v1/models/{model}: the ready models (as Triton's front end lists them);
- POST /v1/completions, POST /v1/chat/completions: text generation by a model in Triton's LLM
  conventions (server/frontends/openai/translate.py), whole or streamed as server-sent events;
- POST /v1/embeddings: an embedding model's vectors;
- POST /v1/models/{model}/load and /unload (--model-control-mode=explicit), GET /metrics and
  GET /health/ready, as Triton's front end has them.

Routes are a `RouteTable` as the HTTP front end's are, each with its restricted group
(server/frontends/openai/restricted.py). Errors are OpenAI's error objects
(server/frontends/openai/errors.py); nothing a client sees is a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from server.frontends.http.asgi_io import (
    JSON,
    Disconnected,
    Receive,
    Scope,
    Send,
    lifespan,
    respond,
)
from server.frontends.http.routes import Route, RouteTable
from server.frontends.openai import params, responses
from server.frontends.openai.chat_template import CONFIG_PARAMETER, Templates, tokenizer_folder
from server.frontends.openai.errors import OpenAIError, from_triton, invalid, too_large, unknown_model
from server.frontends.openai.generation import Choice, Piece, Usage, pieces
from server.frontends.openai.restricted import OpenAIRestrictions, Refused
from server.frontends.openai.sse import serve_events
from server.frontends.openai.token_count import TokenCounters
from server.frontends.openai.translate import ModelInputs, embedding, embedding_request, generation_request
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.restricted import Restrictions

if TYPE_CHECKING:
    from server.protocol.types import InferenceRequest
    from server.service import Admission, InferenceService

log = logging.getLogger("tcli.server.openai")

DEFAULT_MAX_TOKENS = 16  # Triton's front end: --default-max-tokens
_TEXT = (b"content-type", b"text/plain; charset=utf-8")


class OpenAIFrontend:
    """The ASGI application; `create_openai_app` builds it."""

    def __init__(
        self,
        service: InferenceService,
        *,
        tokenizer: str = "",
        chat_template: str = "",
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        max_input_size: int = 64 * 2**20,
        restricted: Restrictions | None = None,
        metrics: Callable[[], bytes] | None = None,
        explicit: bool = False,
    ) -> None:
        self.service = service
        self.tokenizer = tokenizer
        self.templates = Templates(chat_template)
        self.counters = TokenCounters()
        self.default_max_tokens = default_max_tokens
        self.max_input_size = max_input_size
        self._restrictions = OpenAIRestrictions(restricted or {})
        self.metrics = metrics
        self.explicit = explicit  # --model-control-mode=explicit: /v1/models/{model}/load and unload
        self._managing = asyncio.Lock()  # one load or unload at a time, each seeing the last one's end
        self._created: dict[str, int] = {}  # when a model was first listed: OpenAI's `created`

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await lifespan(receive, send)
            return
        try:
            await self._route(scope, receive, send)
        except Disconnected:
            return
        except Refused as refused:
            await respond(send, 401, refused.body)
        except Exception as exc:
            error = _answer(exc, scope.get("method", ""), scope.get("path", ""))
            await respond(send, error.status, error.body())

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        found = ROUTES.match(raw.decode("latin-1") if raw else scope["path"])
        if found is None:
            raise OpenAIError(404, f"Not Found: {scope['method']} {scope['path']}", None, "not_found")
        route, parameters = found
        self._restrictions.check(scope["headers"], route.group)
        declared = _content_length(scope["headers"])
        if declared > self.max_input_size:  # refused from the head, before the body is read
            raise too_large(declared, self.max_input_size)
        method: str = scope["method"]
        if method not in route.methods:
            raise OpenAIError(
                405, f"Method Not Allowed: {method} {scope['path']}", None, "method_not_allowed"
            )
        await route.handler(self, scope, receive, send, method, *parameters)

    # models ----------------------------------------------------------------------------------------
    def _model_names(self) -> list[str]:
        rows = self.service.repository_index(True).models
        names = sorted({row.name for row in rows})
        now = int(time.time())
        for name in names:
            self._created.setdefault(name, now)
        return names

    async def _list_models(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        data = [responses.model_object(name, self._created[name]) for name in self._model_names()]
        await _json(send, {"object": "list", "data": data})

    async def _retrieve_model(
        self, scope: Scope, receive: Receive, send: Send, method: str, model: str
    ) -> None:
        if model not in self._model_names():
            raise unknown_model(model)
        await _json(send, responses.model_object(model, self._created[model]))

    async def _manage_model(
        self, scope: Scope, receive: Receive, send: Send, method: str, model: str, action: str
    ) -> None:
        """Triton's front end's model management (--model-control-mode=explicit): load answers the
        model object, unload {"status": "success", "model": ...}; a model already loaded (load) or not
        loaded (unload) is refused, as there."""
        await self._body(receive)  # none is needed; one over the size limit is still refused
        if not self.explicit:
            raise OpenAIError(400, "Model load/unload requires --model-control-mode=explicit")
        if not model.strip() or model in (".", "..") or "/" in model or "\\" in model:
            raise invalid("model", f"Invalid model name: '{model}': a model is a folder of the repository")
        async with self._managing:
            loaded = model in self._model_names()
            if action == "load" and loaded:
                raise OpenAIError(400, f"Model '{model}' is already loaded", "model", "model_already_loaded")
            if action == "unload" and not loaded:
                raise OpenAIError(400, f"Unknown model: {model}", "model", "model_not_found")
            try:
                if action == "load":
                    await self.service.load(model, None, {})
                else:
                    await self.service.unload(model)
            except TritonError as error:
                raise from_triton(error, model, f"Failed to {action} model '{model}': ") from None
            if action == "unload":
                self._created.pop(model, None)
                return await _json(send, {"status": "success", "model": model})
            self._model_names()
        await _json(send, responses.model_object(model, self._created.get(model, int(time.time()))))

    def _admit(self, name: str) -> tuple[ModelInputs, Admission]:
        admission = self.service.admission(name)
        if admission.error is not None:
            if admission.error.code is ErrorCode.NOT_FOUND or "unknown model" in admission.error.message:
                raise unknown_model(name)
            raise from_triton(admission.error, name)
        batching, inputs = self.service.input_schema(admission)
        outputs = frozenset(tensor.name for tensor in admission.config.output)
        return ModelInputs(name, batching, inputs, outputs), admission

    # completions -----------------------------------------------------------------------------------
    async def _completions(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        document = await self._document(receive)
        name = params.model_name(document)
        sampling = params.sampling(document, chat=False)
        prompts = params.prompts(document)
        model, admission = self._admit(name)
        model.require_text()
        self._check_logprobs(model, sampling)
        echo = sampling.echo and not model.echoes()  # the model cannot echo: the front end does
        run = self._run(model, admission, prompts, sampling, self._tokenizer_folder(admission))
        request_id, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())

        def choice(
            piece: Piece, text: str, logprobs: list[dict[str, Any]] | None, offset: int = 0
        ) -> dict[str, Any]:
            found = None
            if sampling.logprobs is not None and logprobs:
                found = responses.completion_logprobs(logprobs, sampling.logprobs, offset)
            return {
                "index": piece.index,
                "text": text,
                "logprobs": found,
                "finish_reason": piece.finish_reason,
            }

        if sampling.stream:

            async def events() -> AsyncGenerator[dict[str, Any], None]:
                usage = run.usage
                started: set[int] = set()
                offsets: dict[int, int] = {}
                async with _closing(run.pieces) as stream:
                    async for piece in stream:
                        text = piece.text
                        if echo and piece.index not in started:
                            text = prompts[piece.index // sampling.n] + text
                        started.add(piece.index)
                        offset = offsets.get(piece.index, 0)
                        offsets[piece.index] = offset + len(text)
                        yield responses.completion_chunk(
                            request_id, created, name, [choice(piece, text, piece.logprobs, offset)]
                        )
                if sampling.include_usage:
                    yield responses.completion_chunk(request_id, created, name, [], usage.document())

            return await serve_events(receive, send, events())
        texts, logprobs, finals = await run.collect()
        choices = []
        for index, final in sorted(finals.items()):
            text = texts[index]
            if echo:
                text = prompts[index // sampling.n] + text
            choices.append(choice(final, text, logprobs[index]))
        await _json(send, responses.completion(request_id, created, name, choices, run.usage.document()))

    async def _chat_completions(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        document = await self._document(receive)
        name = params.model_name(document)
        sampling = params.sampling(document, chat=True)
        messages = params.messages(document)
        model, admission = self._admit(name)
        model.require_text()
        self._check_logprobs(model, sampling)
        folder = self._tokenizer_folder(admission)
        template = self.templates.for_model(name, folder)
        try:
            prompt = template.render(messages)
        except Exception as exc:  # the template refused the conversation (raise_exception) or failed
            raise invalid(
                "messages", f"model '{name}': its chat template refused the messages: {exc}"
            ) from None
        sampling.echo = False
        run = self._run(model, admission, [prompt], sampling, folder)
        request_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        top = sampling.logprobs or 0

        def logprobs_of(entries: list[dict[str, Any]] | None) -> dict[str, Any] | None:
            if sampling.logprobs is None or not entries:
                return None
            return responses.chat_logprobs(entries, top)

        if sampling.stream:

            async def events() -> AsyncGenerator[dict[str, Any], None]:
                usage = run.usage
                started: set[int] = set()
                async with _closing(run.pieces) as stream:
                    async for piece in stream:
                        if piece.index not in started:  # each choice opens with its role
                            started.add(piece.index)
                            opening = {
                                "index": piece.index,
                                "delta": {"role": "assistant", "content": ""},
                                "logprobs": None,
                                "finish_reason": None,
                            }
                            yield responses.chat_chunk(request_id, created, name, [opening])
                        delta = {"content": piece.text} if piece.text or piece.finish_reason is None else {}
                        item = {
                            "index": piece.index,
                            "delta": delta,
                            "logprobs": logprobs_of(piece.logprobs),
                            "finish_reason": piece.finish_reason,
                        }
                        yield responses.chat_chunk(request_id, created, name, [item])
                if sampling.include_usage:
                    yield responses.chat_chunk(request_id, created, name, [], usage.document())

            return await serve_events(receive, send, events())
        texts, logprobs, finals = await run.collect()
        choices = [
            {
                "index": index,
                "message": {"role": "assistant", "content": texts[index]},
                "logprobs": logprobs_of(logprobs[index]),
                "finish_reason": final.finish_reason,
            }
            for index, final in sorted(finals.items())
        ]
        await _json(send, responses.chat_completion(request_id, created, name, choices, run.usage.document()))

    def _check_logprobs(self, model: ModelInputs, sampling: params.Sampling) -> None:
        if sampling.logprobs is not None and not model.takes_logprobs():
            raise invalid(
                "logprobs",
                f"model '{model.name}' does not return logprobs (it has no 'return_logprobs' or "
                "'sampling_parameters' input)",
            )

    def _tokenizer_folder(self, admission: Admission) -> Path | None:
        """The model's tokenizer folder: its config's parameter, --openai-tokenizer, or its own."""
        config = admission.config
        parameter = (
            config.parameters[CONFIG_PARAMETER].string_value if CONFIG_PARAMETER in config.parameters else ""
        )
        folder = admission.model.path if admission.model is not None else None
        return tokenizer_folder(parameter, Path(folder) if folder else None, self.tokenizer)

    def _run(
        self,
        model: ModelInputs,
        admission: Admission,
        prompts: list[str],
        sampling: params.Sampling,
        tokenizer: Path | None,
    ) -> _Run:
        if sampling.max_tokens is None:
            sampling.max_tokens = self.default_max_tokens
        base = uuid.uuid4().hex[:16]
        choices = []
        for p, prompt in enumerate(prompts):
            for j in range(sampling.n):
                index = p * sampling.n + j
                seed = None if sampling.seed is None else sampling.seed + j  # n choices: n different seeds
                request = generation_request(model, prompt, sampling, f"{base}-{index}", seed)
                choices.append(Choice(index, p, request))
        usage = Usage(counter=self.counters.for_folder(tokenizer), prompts=list(prompts))
        stream = pieces(self.service, admission, choices, sampling.stop, sampling.max_tokens, usage)
        return _Run(stream, usage)

    # embeddings ------------------------------------------------------------------------------------
    async def _embeddings(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        document = await self._document(receive)
        name = params.model_name(document)
        texts = document.get("input")
        if texts is None:
            raise invalid("input", "Missing required parameter: 'input'")
        items = texts if type(texts) is list else [texts]
        if not items or any(type(item) is not str or not item for item in items):
            raise invalid(
                "input", "Invalid value for 'input': expected a non-empty string or array of strings"
            )
        encoding = document.get("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise invalid(
                "encoding_format",
                f"Invalid value for 'encoding_format': 'float' or 'base64', got {encoding!r}",
            )
        dimensions = document.get("dimensions")
        if dimensions is not None and (type(dimensions) is not int or dimensions < 1):
            raise invalid(
                "dimensions",
                f"Invalid value for 'dimensions': expected an integer of at least 1, got {dimensions!r}",
            )
        model, admission = self._admit(name)
        base = uuid.uuid4().hex[:16]
        requests = [embedding_request(model, text, dimensions, f"{base}-{i}") for i, text in enumerate(items)]

        async def embed(request: InferenceRequest) -> tuple[list[float], int | None]:
            answers = self.service.infer_stream(request, admission)
            async with _closing(answers) as stream:
                async for item in stream:
                    if item.error is not None:
                        raise from_triton(item.error)
                    if item.response is not None:
                        return embedding(name, item.response)  # closing the stream ends the request
            raise OpenAIError(500, f"model '{name}' answered no response")

        # side by side: a batching model merges them
        tasks = [asyncio.ensure_future(embed(request)) for request in requests]
        try:
            found = await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
        data = [responses.embedding_item(i, vector, encoding) for i, (vector, _) in enumerate(found)]
        tokens = sum(counted or 0 for _, counted in found)
        usage = {"prompt_tokens": tokens, "total_tokens": tokens}
        await _json(send, {"object": "list", "data": data, "model": name, "usage": usage})

    # utilities -------------------------------------------------------------------------------------
    async def _ready(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        await respond(send, 200 if self.service.ready() else 400, b"", [_TEXT])

    async def _metrics(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        if self.metrics is None:
            raise OpenAIError(404, "metrics are off (--allow-metrics=false)", None, "not_found")
        await respond(
            send, 200, self.metrics(), [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
        )

    async def _document(self, receive: Receive) -> dict[str, Any]:
        """The request body as a JSON object."""
        return params.read_body(await self._body(receive))

    async def _body(self, receive: Receive) -> bytes:
        """The request body, read within --http-max-input-size."""
        pieces: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise Disconnected
            piece = message.get("body", b"")
            size += len(piece)
            if size > self.max_input_size:
                raise too_large(size, self.max_input_size)
            pieces.append(piece)
            if not message.get("more_body", False):
                return b"".join(pieces)


class _Run:
    """A completion's choices under way: their pieces (streamed or collected) and the usage so far."""

    def __init__(self, stream: AsyncGenerator[Piece, None], usage: Usage) -> None:
        self.pieces = stream
        self.usage = usage

    async def collect(
        self,
    ) -> tuple[dict[int, str], dict[int, list[dict[str, Any]] | None], dict[int, Piece]]:
        texts: dict[int, str] = {}
        logprobs: dict[int, list[dict[str, Any]] | None] = {}
        finals: dict[int, Piece] = {}
        async with _closing(self.pieces) as stream:
            async for piece in stream:
                texts[piece.index] = texts.get(piece.index, "") + piece.text
                if piece.logprobs:
                    logprobs[piece.index] = (logprobs.get(piece.index) or []) + piece.logprobs
                else:
                    logprobs.setdefault(piece.index, None)
                if piece.finish_reason is not None:
                    finals[piece.index] = piece
        return texts, logprobs, finals


def _closing(stream: AsyncGenerator[Any, None]) -> contextlib.aclosing[AsyncGenerator[Any, None]]:
    return contextlib.aclosing(stream)


def _content_length(headers: list[tuple[bytes, bytes]]) -> int:
    for key, value in headers:
        if key == b"content-length":
            return int(value) if value.isdigit() else -1
    return -1


async def _json(send: Send, document: Any) -> None:
    await respond(send, 200, orjson.dumps(document), [JSON])


def _answer(exc: Exception, method: str, path: str) -> OpenAIError:
    """The error answer to a request that failed with `exc`; anything unexpected is logged with its
    traceback and answered 500 in one line."""
    if isinstance(exc, OpenAIError):
        return exc
    if isinstance(exc, TritonError):
        return from_triton(exc)
    log.error("unexpected error handling %s %s", method, path, exc_info=exc)
    return OpenAIError(500, f"internal error: {type(exc).__name__}: {exc}")


def create_openai_app(service: InferenceService, **options: Any) -> OpenAIFrontend:
    """The OpenAI-compatible ASGI app over `service` (options: see OpenAIFrontend)."""
    return OpenAIFrontend(service, **options)


_F = OpenAIFrontend
_GET, _POST = ("GET",), ("POST",)
_REPO = "model-repository"

# Triton's OpenAI routes (python/openai/openai_frontend/frontend/fastapi/routers), with their groups
ROUTES = RouteTable(
    (
        Route(_GET, r"/v1/models", _F._list_models, _REPO),
        Route(_POST, r"/v1/models/([^/]++)/(load|unload)", _F._manage_model, _REPO),
        Route(_GET, r"/v1/models/([^/]++)", _F._retrieve_model, _REPO),
        Route(_POST, r"/v1/completions", _F._completions, "inference"),
        Route(_POST, r"/v1/chat/completions", _F._chat_completions, "inference"),
        Route(_POST, r"/v1/embeddings", _F._embeddings, "inference"),
        Route(_GET, r"/metrics", _F._metrics, "metrics"),
        Route(_GET, r"/health/ready", _F._ready, "health"),
    )
)
