"""Host a `TritonPythonModel` (backend: "python") in this process: initialize with Triton's args,
execute lists of requests through our `triton_python_backend_utils`, finalize on unload.

Each instance runs on its own worker thread, so pure-Python models share the GIL; models that spend
their time in numpy or a framework release it.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

from server.backends.base import InstanceSpec, ModelContext, RequestModel
from server.backends.python import model_import
from server.backends.python import triton_python_backend_utils as pb_utils
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceResponse, Tensor

if TYPE_CHECKING:
    from server.protocol.types import InferenceRequest

# request parameters Triton consumes itself; the rest reach the model through request.parameters()
_RESERVED_PARAMETERS = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output", "headers"}
)
_KIND_NAMES = {"KIND_CPU": "CPU", "KIND_GPU": "GPU", "KIND_MODEL": "MODEL"}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


class PythonModel(RequestModel):
    def __init__(self, context: ModelContext, instance: InstanceSpec) -> None:
        from server.config.write import to_json_dict

        config = context.config
        self.name = config.name
        self.version = str(context.version)
        self._scope = pb_utils.ModelScope(self.name, self.version, str(context.version_dir))
        self._config_json = to_json_dict(config)
        self._outputs = [o.name for o in config.output]
        if pb_utils.using_decoupled_model_transaction_policy(self._config_json):
            raise TritonError(
                ErrorCode.UNSUPPORTED,
                f"model '{self.name}': decoupled python models are not served yet",
            )
        try:
            self._module = model_import.import_model_file(context.model_file, self.name)
        except Exception as exc:  # the model file's own error, reported on its version
            raise TritonError(ErrorCode.INTERNAL, f"model.py for '{self.name}': {_first_line(exc)}") from None
        model_class = getattr(self._module, "TritonPythonModel", None)
        if model_class is None:
            model_import.forget_module(self._module)
            raise TritonError(
                ErrorCode.INTERNAL,
                f"model.py for '{self.name}': AttributeError: module has no attribute 'TritonPythonModel'",
            )
        args = {
            "model_config": json.dumps(self._config_json),
            "model_instance_kind": _KIND_NAMES.get(instance.kind, "CPU"),
            "model_instance_name": instance.name,
            "model_instance_device_id": str(instance.device_id),
            "model_repository": str(context.model_dir),
            "model_version": self.version,
            "model_name": self.name,
        }
        try:
            with pb_utils.model_scope(self._scope):
                self._model = model_class()
                if hasattr(self._model, "initialize"):
                    self._model.initialize(args)
        except Exception as exc:  # initialize() failing makes this version UNAVAILABLE, as in Triton
            model_import.forget_module(self._module)
            raise TritonError(
                ErrorCode.INTERNAL, f"model '{self.name}' initialize() failed: {_first_line(exc)}"
            ) from None

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse | TritonError]:
        pb_requests = [self._to_pb(r) for r in requests]
        try:
            with pb_utils.model_scope(self._scope):
                results = self._model.execute(pb_requests)
        except Exception as exc:  # the model's error fails these requests only
            error = TritonError(
                ErrorCode.INTERNAL,
                f"Failed to process the request(s) for model '{self.name}', message: {_first_line(exc)}",
            )
            return [error] * len(requests)
        if not isinstance(results, list | tuple) or len(results) != len(requests):
            count = len(results) if isinstance(results, list | tuple) else type(results).__name__
            error = TritonError(
                ErrorCode.INTERNAL,
                f"model '{self.name}' execute() must return one InferenceResponse per request: got {count} "
                f"for {len(requests)} requests",
            )
            return [error] * len(requests)
        return [self._from_pb(request, result) for request, result in zip(requests, results, strict=True)]

    def unload(self) -> None:
        model = getattr(self, "_model", None)
        if model is not None and hasattr(model, "finalize"):
            with (
                contextlib.suppress(Exception),
                pb_utils.model_scope(self._scope),
            ):  # unload goes on regardless
                model.finalize()
        self._model = None
        model_import.forget_module(self._module)

    # conversions -----------------------------------------------------------------------------------
    def _to_pb(self, request: InferenceRequest) -> Any:
        inputs = [
            pb_utils.tensor_from_storage(t.name, t.data, pb_utils.wire_to_dtype(t.datatype))
            if t.datatype == "BF16"
            else pb_utils.Tensor(t.name, t.data)
            for t in request.inputs
        ]
        flags = (1 if request.sequence_start else 0) | (2 if request.sequence_end else 0)
        parameters = {k: v for k, v in request.parameters.items() if k not in _RESERVED_PARAMETERS}
        return pb_utils.new_execute_request(
            inputs=inputs,
            requested_output_names=[o.name for o in request.outputs] or self._outputs,
            request_id=request.id,
            correlation_id=request.correlation_id,
            flags=flags,
            timeout=request.timeout_us,
            parameters=parameters,
            model_name=self.name,
            model_version=int(self.version),
        )

    def _from_pb(self, request: InferenceRequest, result: Any) -> InferenceResponse | TritonError:
        if not isinstance(result, pb_utils.InferenceResponse):
            return TritonError(
                ErrorCode.INTERNAL,
                f"model '{self.name}' execute() returned {type(result).__name__}, expected InferenceResponse",
            )
        if result.has_error():
            error = result.error()
            assert error is not None
            return TritonError(ErrorCode[pb_utils.error_code_name(error)], error.message())
        wanted = {o.name for o in request.outputs} or set(self._outputs)
        outputs = []
        for tensor in result.output_tensors():
            if tensor.name() not in wanted:
                continue
            data = pb_utils.tensor_storage(tensor)
            datatype = pb_utils.dtype_to_wire(tensor.triton_dtype())
            outputs.append(Tensor(tensor.name(), datatype, tuple(int(d) for d in data.shape), data))
        parameters = pb_utils.response_parameters(result)
        return InferenceResponse(self.name, self.version, request.id, outputs, dict(parameters))
