"""`tcli repo import` without a tracking server: what a model URI names, and an MLflow signature as
Triton tensors (types, batch dimension, names made safe, what cannot be served)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mlflow")

from mlflow.models import ModelSignature
from mlflow.types import ColSpec, Schema, TensorSpec

from server.config.scaffold import TensorArg
from tcli.errors import CliError
from tcli.mlflow_import.signature import pyfunc_tensors
from tcli.mlflow_import.uri import parse_model_uri


@pytest.mark.parametrize(
    ("text", "kind", "name", "version", "alias"),
    [
        ("models:/fraud/3", "registry", "fraud", 3, None),
        ("models:/fraud@champion", "registry", "fraud", None, "champion"),
        ("models:/fraud/Production", "registry", "fraud", None, None),
        ("models:/m-0123abcd", "logged", "m-0123abcd", None, None),
        ("runs:/0a1b2c/model", "run", "model", None, None),
        ("/tmp/exports/credit score/", "path", "credit_score", None, None),
        ("file:///tmp/exports/iris", "path", "iris", None, None),
    ],
)
def test_model_uris(text: str, kind: str, name: str, version: int | None, alias: str | None) -> None:
    uri = parse_model_uri(text)
    assert (uri.kind, uri.default_name, uri.version, uri.alias) == (kind, name, version, alias)
    assert uri.needs_tracking_server == (kind != "path")


def test_columns_become_batched_inputs_of_one_value_per_row() -> None:
    signature = ModelSignature(
        Schema([ColSpec("long", "rooms"), ColSpec("double", "area"), ColSpec("string", "city name")]),
        Schema([ColSpec("double")]),
    )
    tensors = pyfunc_tensors(signature, None)
    assert tensors.max_batch_size == 4
    assert tensors.inputs == (
        TensorArg("rooms", "TYPE_INT64", (1,)),
        TensorArg("area", "TYPE_FP64", (1,)),
        TensorArg("city_name", "TYPE_STRING", (1,)),
    )
    assert tensors.outputs == (TensorArg("OUTPUT0", "TYPE_FP64", (1,)),)
    unbatched = pyfunc_tensors(signature, 0)
    assert unbatched.max_batch_size == 0 and unbatched.inputs[0].dims == (-1,)


def test_tensors_keep_their_shape_after_the_batch_dimension() -> None:
    signature = ModelSignature(
        Schema(
            [
                TensorSpec(np.dtype(np.float32), (-1, 3, 8), "pixels"),
                TensorSpec(np.dtype(np.bool_), (-1,), "mask"),
            ]
        ),
        Schema([TensorSpec(np.dtype(np.int32), (-1, 10))]),
    )
    tensors = pyfunc_tensors(signature, 16)
    assert tensors.max_batch_size == 16
    assert tensors.inputs == (TensorArg("pixels", "TYPE_FP32", (3, 8)), TensorArg("mask", "TYPE_BOOL", ()))
    assert tensors.outputs == (TensorArg("OUTPUT0", "TYPE_INT32", (10,)),)


def test_a_fixed_first_dimension_cannot_batch() -> None:
    signature = ModelSignature(
        Schema([TensorSpec(np.dtype(np.float64), (2, 4))]), Schema([TensorSpec(np.dtype(np.float64), (2,))])
    )
    tensors = pyfunc_tensors(signature, None)
    assert tensors.max_batch_size == 0 and tensors.inputs[0] == TensorArg("INPUT0", "TYPE_FP64", (2, 4))
    with pytest.raises(CliError, match="--max-batch-size 0"):
        pyfunc_tensors(signature, 8)


def test_names_that_clash_once_made_safe_stay_apart() -> None:
    signature = ModelSignature(
        Schema([ColSpec("double", "a b"), ColSpec("double", "a/b")]), Schema([ColSpec("double", "y")])
    )
    assert [t.name for t in pyfunc_tensors(signature, None).inputs] == ["a_b", "a_b_1"]


def test_types_without_a_triton_tensor_are_refused() -> None:
    signature = ModelSignature(Schema([ColSpec("datetime", "when")]), Schema([ColSpec("double")]))
    with pytest.raises(CliError, match="input 'when' of the signature has MLflow type datetime"):
        pyfunc_tensors(signature, None)


def test_a_signature_without_outputs_says_how_to_log_one() -> None:
    with pytest.raises(CliError, match="infer_signature"):
        pyfunc_tensors(ModelSignature(Schema([ColSpec("double", "x")])), None)
