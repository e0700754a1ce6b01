"""Send one generation request and time each response as it arrives: over an OpenAI endpoint
(chat or completions, streamed as server-sent events, as AIPerf sends them) or to a decoupled Triton
model over gRPC ModelStreamInfer (Triton's LLM conventions: text_input, stream, sampling_parameters
or max_tokens, exclude_input_in_output; text_output back, one response per token).

Each client holds its connections for a whole run; `generate` is called by one concurrency slot at a
time per stream (tcli/perf/llm/runner.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class RequestRecord:
    """One request: when it was sent, when each response with text came, the text, or its error."""

    start_ns: int
    input_tokens: int
    token_ns: list[int] = field(default_factory=list)
    chunks: list[str] = field(default_factory=list)
    end_ns: int = 0
    error: str = ""
    output_tokens: int = 0  # counted after the run (tcli/perf/llm/runner.py)
    server_output_tokens: int | None = None  # as the server counted them (--use-server-token-count)
    server_input_tokens: int | None = None

    @property
    def text(self) -> str:
        return "".join(self.chunks)


@dataclass(frozen=True)
class GenerationSettings:
    model: str
    max_tokens: int | None  # None: the model's own default
    extra: dict[str, Any]  # --extra-inputs, into the request body or sampling_parameters
    server_token_count: bool = False  # ask the server to count tokens (usage, num_output_tokens)


def _now() -> int:
    return time.perf_counter_ns()


class OpenAIClient:
    """POST /v1/chat/completions or /v1/completions with "stream": true over one pooled httpx client."""

    def __init__(
        self, base_url: str, endpoint_type: str, settings: GenerationSettings, streaming: bool
    ) -> None:
        import httpx

        self.endpoint_type = endpoint_type
        self.path = "/v1/chat/completions" if endpoint_type == "chat" else "/v1/completions"
        self.settings = settings
        self.streaming = streaming
        self.http = httpx.AsyncClient(base_url=base_url, timeout=httpx.Timeout(600.0, connect=10.0))

    def _body(self, prompt: str) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.settings.model, "stream": self.streaming}
        if self.streaming and self.settings.server_token_count:
            body["stream_options"] = {"include_usage": True}
        if self.endpoint_type == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
            if self.settings.max_tokens is not None:
                body["max_completion_tokens"] = self.settings.max_tokens
        else:
            body["prompt"] = prompt
            if self.settings.max_tokens is not None:
                body["max_tokens"] = self.settings.max_tokens
        body.update(self.settings.extra)
        return body

    def _text(self, message: dict[str, Any]) -> str:
        choices = message.get("choices") or []
        if not choices:
            return ""
        choice = choices[0]
        if self.endpoint_type == "chat":
            part = choice.get("delta") if self.streaming else choice.get("message")
            return str((part or {}).get("content") or "")
        return str(choice.get("text") or "")

    async def generate(self, prompt: str, input_tokens: int) -> RequestRecord:
        record = RequestRecord(_now(), input_tokens)
        try:
            async with self.http.stream("POST", self.path, json=self._body(prompt)) as response:
                if response.status_code != 200:
                    body = (await response.aread()).decode("utf-8", "replace")
                    record.error = f"HTTP {response.status_code}: {_openai_error(body)}"
                    return record
                if not self.streaming:
                    message = json.loads(await response.aread())
                    _usage(record, message)
                    text = self._text(message)
                    if text:
                        record.token_ns.append(_now())
                        record.chunks.append(text)
                    return record
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    message = json.loads(data)
                    if "error" in message:
                        record.error = _openai_error(data)
                        break
                    _usage(record, message)
                    text = self._text(message)
                    if text:
                        record.token_ns.append(_now())
                        record.chunks.append(text)
        except Exception as exc:  # the connection, the body: one line in the report
            record.error = f"{type(exc).__name__}: {exc}"
        finally:
            record.end_ns = _now()
        return record

    async def close(self) -> None:
        await self.http.aclose()


def _usage(record: RequestRecord, message: dict[str, Any]) -> None:
    usage = message.get("usage")
    if isinstance(usage, dict):
        record.server_output_tokens = usage.get("completion_tokens", record.server_output_tokens)
        record.server_input_tokens = usage.get("prompt_tokens", record.server_input_tokens)


def _openai_error(body: str) -> str:
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return body.strip()[:200]
    if isinstance(error, dict):
        return str(error.get("message", error))
    return str(error)


class TritonStream:
    """One ModelStreamInfer stream carrying one request at a time (as perf_analyzer's --streaming
    does per request in flight), each asking for an empty final response so its end is known."""

    def __init__(self, stub: Any, template: Any) -> None:
        self.template = template
        self.outgoing: asyncio.Queue[Any] = asyncio.Queue()
        self.call = stub.ModelStreamInfer(self._requests())

    async def _requests(self) -> AsyncIterator[Any]:
        while True:
            request = await self.outgoing.get()
            if request is None:
                return
            yield request

    async def generate(self, prompt: str, input_tokens: int) -> RequestRecord:
        from server.protocol import bytes_codec

        request = type(self.template)()
        request.CopyFrom(self.template)
        request.raw_input_contents[0] = _bytes_element(prompt)
        record = RequestRecord(_now(), input_tokens)
        await self.outgoing.put(request)
        try:
            while True:
                message = await self.call.read()
                if message is None or not hasattr(message, "infer_response"):
                    record.error = "the server closed the stream"
                    break
                if message.error_message:
                    record.error = message.error_message
                    break
                answer = message.infer_response
                for index, output in enumerate(answer.outputs):
                    if output.name == "text_output" and index < len(answer.raw_output_contents):
                        values = bytes_codec.deserialize(answer.raw_output_contents[index], "text_output")
                        text = b"".join(values).decode("utf-8", "replace")
                        if text:
                            record.token_ns.append(_now())
                            record.chunks.append(text)
                    elif output.name in ("num_output_tokens", "num_input_tokens"):
                        raw = (
                            answer.raw_output_contents[index]
                            if index < len(answer.raw_output_contents)
                            else b""
                        )
                        if len(raw) >= 4:
                            count = int(np.frombuffer(raw[:4], dtype=np.uint32)[0])
                            if output.name == "num_input_tokens":
                                record.server_input_tokens = count
                            else:
                                record.server_output_tokens = (record.server_output_tokens or 0) + count
                final = answer.parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    break
        except Exception as exc:  # the stream broke: one line in the report
            record.error = f"{type(exc).__name__}: {exc}"
        finally:
            record.end_ns = _now()
        return record

    async def close(self) -> None:
        await self.outgoing.put(None)
        self.call.cancel()


def _bytes_element(text: str) -> bytes:
    from server.protocol import bytes_codec

    return bytes_codec.serialize([text.encode("utf-8")])


class TritonClient:
    """Requests to a decoupled model in Triton's LLM conventions, over one gRPC channel."""

    def __init__(
        self,
        url: str,
        model: str,
        version: str,
        inputs: set[str],
        batched: bool,
        settings: GenerationSettings,
    ) -> None:
        import grpc
        from tritonclient.grpc import service_pb2, service_pb2_grpc

        self.channel = grpc.aio.insecure_channel(url, options=[("grpc.max_receive_message_length", -1)])
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        shape = [1, 1] if batched else [1]
        request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
        request.parameters["triton_enable_empty_final_response"].bool_param = True

        def add(name: str, datatype: str, raw: bytes) -> None:
            tensor = request.inputs.add(name=name, datatype=datatype)
            tensor.shape.extend(shape)
            request.raw_input_contents.append(raw)

        add("text_input", "BYTES", b"")
        if "stream" in inputs:
            add("stream", "BOOL", np.array([True]).tobytes())
        if "exclude_input_in_output" in inputs:
            add("exclude_input_in_output", "BOOL", np.array([True]).tobytes())
        sampling = dict(settings.extra)
        if settings.max_tokens is not None:
            sampling["max_tokens"] = settings.max_tokens
        if settings.server_token_count:
            for name in ("return_num_input_tokens", "return_num_output_tokens"):
                if name in inputs:
                    add(name, "BOOL", np.array([True]).tobytes())
        if "sampling_parameters" in inputs:
            add("sampling_parameters", "BYTES", _bytes_element(json.dumps(sampling)))
        elif "max_tokens" in inputs and settings.max_tokens is not None:
            add("max_tokens", "INT32", np.array([settings.max_tokens], dtype=np.int32).tobytes())
        self.template = request
        self.streams: list[TritonStream] = []

    def stream(self) -> TritonStream:
        stream = TritonStream(self.stub, self.template)
        self.streams.append(stream)
        return stream

    async def close(self) -> None:
        for stream in self.streams:
            await stream.close()
        await self.channel.close()
