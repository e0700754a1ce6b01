"""A model of the in-process server, as `tritonserver.Model`: inference (`infer`, `async_infer`) and
what the model says of itself (readiness, metadata, config, statistics), each answered by the same
core-service call the front ends make, as the JSON document REST answers with, decoded."""

from __future__ import annotations

import asyncio
import queue
from typing import Any

import orjson

from server.protocol import json_messages
from server.protocol.config_json import to_json_dict
from tcli.inprocess._connection import Connection
from tcli.inprocess._errors import InvalidArgumentError
from tcli.inprocess._flight import Flight, deliver_threadsafe
from tcli.inprocess._request import InferenceRequest
from tcli.inprocess._response import AsyncResponseIterator, InferenceResponse, ResponseIterator
from tcli.inprocess._types import ModelBatchFlag, ModelTxnPropertyFlag


class Model:
    def __init__(
        self,
        connection: Connection,
        name: str,
        version: int = -1,
        state: str | None = None,
        reason: str | None = None,
    ) -> None:
        self._connection = connection
        self.name = name
        self.version = version  # -1: the highest ready version
        self.state = state
        self.reason = reason

    def __repr__(self) -> str:
        return repr({"name": self.name, "version": self.version, "state": self.state})

    def versioned(self, version: str) -> Model:
        """This model at the version a response names (itself when that is already its version)."""
        number = int(version) if version.isdigit() else -1
        return self if number == self.version else Model(self._connection, self.name, number, self.state)

    @property
    def _version(self) -> str:
        return "" if self.version < 0 else str(self.version)

    # inference -------------------------------------------------------------------------------------
    def create_request(self, **kwargs: Any) -> InferenceRequest:
        kwargs.pop("model", None)
        return InferenceRequest(model=self, **kwargs)

    def infer(
        self, inference_request: InferenceRequest | None = None, raise_on_error: bool = True, **kwargs: Any
    ) -> ResponseIterator:
        """Send a request; its responses come from the iterator returned, as they are sent."""
        request = inference_request or self.create_request(**kwargs)
        user_queue = request.response_queue
        if user_queue is not None and not isinstance(user_queue, queue.SimpleQueue):
            raise InvalidArgumentError("queue.SimpleQueue must be used for response iterator")
        responses: queue.SimpleQueue[InferenceResponse] = queue.SimpleQueue()

        def deliver(response: InferenceResponse) -> None:
            if user_queue is not None:  # first: by the time the iterator yields it, the user's queue has it
                user_queue.put(response)
            responses.put(response)

        flight = self._connection.submit(
            Flight(self, request.to_server(), deliver, request.output_placement())
        )
        return ResponseIterator(flight, responses, raise_on_error)

    def async_infer(
        self, inference_request: InferenceRequest | None = None, raise_on_error: bool = True, **kwargs: Any
    ) -> AsyncResponseIterator:
        """Send a request from a coroutine; `async for` its responses."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise InvalidArgumentError(
                "async_infer needs a running event loop: call it from a coroutine, or use infer()"
            ) from None
        request = inference_request or self.create_request(**kwargs)
        user_queue = request.response_queue
        if user_queue is not None and not isinstance(user_queue, asyncio.Queue):
            raise InvalidArgumentError("asyncio.Queue must be used for async response iterator")
        responses: asyncio.Queue[InferenceResponse] = asyncio.Queue()
        # the user's queue first: by the time the iterator yields a response, that queue has it
        targets = (responses,) if user_queue is None else (user_queue, responses)
        deliver = deliver_threadsafe(loop, *targets)
        flight = self._connection.submit(
            Flight(self, request.to_server(), deliver, request.output_placement())
        )
        return AsyncResponseIterator(flight, responses, raise_on_error)

    # about the model -------------------------------------------------------------------------------
    def ready(self) -> bool:
        service = self._connection.service()
        return self._connection.on_loop(lambda: service.model_ready(self.name, self._version).ready)

    def metadata(self) -> dict[str, Any]:
        service = self._connection.service()
        message = self._connection.on_loop(lambda: service.model_metadata(self.name, self._version))
        return dict(orjson.loads(json_messages.encode(message)))

    def config(self, config_version: int = 1) -> dict[str, Any]:
        """The model's configuration as REST's config endpoint answers it (`config_version` is
        accepted for tritonserver's signature; there is one version)."""
        service = self._connection.service()
        message = self._connection.on_loop(lambda: service.model_config(self.name, self._version))
        return to_json_dict(message.config)

    def statistics(self) -> dict[str, Any]:
        service = self._connection.service()
        message = self._connection.on_loop(lambda: service.statistics(self.name, self._version))
        return dict(orjson.loads(json_messages.encode(message)))

    def batch_properties(self) -> ModelBatchFlag:
        batching = self.config().get("max_batch_size", 0) > 0
        return ModelBatchFlag.FIRST_DIM if batching else ModelBatchFlag.UNKNOWN

    def transaction_properties(self) -> ModelTxnPropertyFlag:
        decoupled = self.config().get("model_transaction_policy", {}).get("decoupled", False)
        return ModelTxnPropertyFlag.DECOUPLED if decoupled else ModelTxnPropertyFlag.ONE_TO_ONE
