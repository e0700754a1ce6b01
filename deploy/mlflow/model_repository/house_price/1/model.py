"""An MLflow pyfunc model served by Triton's python backend (on tcli or on Triton itself).

`tcli repo import` writes this file as model.py; deploy/mlflow/ uses it as is. initialize() loads the
model with `mlflow.pyfunc.load_model` from:
- the config parameter MLFLOW_MODEL_URI when it is set (models:/NAME@ALIAS, runs:/...): pulled from
  the tracking server that MLFLOW_TRACKING_URI names in the server's environment, each time it loads;
- otherwise the MLmodel folder `mlflow_model/` in the version folder, copied there by the import.

The config's inputs and outputs follow the model's signature in order; their names may differ (Triton
names are made safe). A column-based signature gets a DataFrame, a column per input and a row per
batch entry; a tensor-based one gets a dict of arrays, or the array for one unnamed tensor. The
model's own dependencies must be installed where the server runs (see its requirements.txt).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

MODEL_FOLDER = "mlflow_model"
URI_PARAMETER = "MLFLOW_MODEL_URI"


def model_location(args: dict[str, str], config: dict[str, Any]) -> str:
    uri: str = config.get("parameters", {}).get(URI_PARAMETER, {}).get("string_value", "")
    return uri or str(Path(args["model_repository"]) / args["model_version"] / MODEL_FOLDER)


def _is_text(spec: Any) -> bool:
    """A string column (DataType.string) or a numpy str tensor: BYTES arrive as bytes, models want str;
    binary columns and object tensors keep their bytes."""
    kind = getattr(spec.type, "kind", None)
    return kind == "U" if isinstance(kind, str) else getattr(spec.type, "name", "") == "string"


def _decoded(array: np.ndarray) -> np.ndarray:
    flat = [v.decode("utf-8") if isinstance(v, bytes) else v for v in array.reshape(-1)]
    return np.array(flat, dtype=object).reshape(array.shape)


def _encoded(array: np.ndarray) -> np.ndarray:
    flat = [v if isinstance(v, bytes) else str(v).encode("utf-8") for v in array.reshape(-1)]
    return np.array(flat, dtype=object).reshape(array.shape)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        import mlflow.pyfunc  # heavy: imported when the model loads, not when a repository is checked

        config = json.loads(args["model_config"])
        self.model = mlflow.pyfunc.load_model(model_location(args, config))
        inputs = self.model.metadata.get_input_schema()
        outputs = self.model.metadata.get_output_schema()
        if inputs is None or outputs is None:
            raise pb_utils.TritonModelException("the MLflow model has no signature: log it with one")
        self.tensor_based = inputs.is_tensor_spec()
        self.inputs = list(zip((t["name"] for t in config["input"]), inputs.inputs, strict=False))
        self.output_keys = [spec.name for spec in outputs.inputs]
        self.outputs = [
            (t["name"], np.dtype(pb_utils.triton_string_to_numpy(t["data_type"])), len(t["dims"]))
            for t in config["output"]
        ]
        self.batched = config.get("max_batch_size", 0) > 0

    def model_input(self, request: Any) -> Any:
        """The request's tensors as the model's signature wants them."""
        values: dict[Any, np.ndarray] = {}
        for index, (name, spec) in enumerate(self.inputs):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            if tensor is None:  # an optional input left out
                continue
            array = tensor.as_numpy()
            if array.dtype == np.object_ and _is_text(spec):
                array = _decoded(array)
            if not self.tensor_based or len(spec.shape) == 1:  # one value per row
                array = array.reshape(-1)
            values[spec.name if spec.name is not None else index] = array
        if not self.tensor_based:
            import pandas as pd

            return pd.DataFrame(values)
        if len(values) == 1 and self.inputs[0][1].name is None:
            return next(iter(values.values()))
        return values

    def split_outputs(self, predictions: Any) -> list[Any]:
        """One value per configured output, from whatever predict() returned."""
        keys = self.output_keys
        if isinstance(predictions, dict):
            chosen = keys if all(k in predictions for k in keys) else list(predictions)
            return [predictions[k] for k in chosen]
        if len(self.outputs) == 1:
            return [predictions]
        if hasattr(predictions, "columns"):  # a DataFrame: by column name, else by position
            if all(k in predictions.columns for k in keys):
                return [predictions[k] for k in keys]
            return [predictions.iloc[:, i] for i in range(len(self.outputs))]
        array = np.asarray(predictions)
        return [array[:, i] for i in range(len(self.outputs))]

    def output_tensors(self, predictions: Any) -> list[Any]:
        tensors = []
        for (name, dtype, rank), value in zip(self.outputs, self.split_outputs(predictions), strict=False):
            array = np.asarray(value)
            array = _encoded(array) if dtype == np.object_ else array.astype(dtype, copy=False)
            while array.ndim < rank + self.batched:  # a column of N values answers dims [1] as [N, 1]
                array = array[..., np.newaxis]
            tensors.append(pb_utils.Tensor(name, np.ascontiguousarray(array)))
        return tensors

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            try:
                predictions = self.model.predict(self.model_input(request))
                responses.append(pb_utils.InferenceResponse(output_tensors=self.output_tensors(predictions)))
            except Exception as exc:  # a request the model refuses fails alone, with mlflow's message
                error = pb_utils.TritonError(f"{type(exc).__name__}: {' '.join(str(exc).split())}")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
        return responses
