"""The example simple_sequence model keeps a running sum per open sequence and drops it at the
sequence's END request: its memory follows the open sequences, not every sequence ever seen (an hour
of new sequence ids grew it by megabytes while it kept them all)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from server.backends.python import triton_python_backend_utils as pb_utils
from server.backends.python.model_import import forget_module, import_model_file

MODEL_FILE = Path(__file__).resolve().parents[2] / "model_repository" / "simple_sequence" / "1" / "model.py"


def _request(sequence_id: int, value: int, *, start: bool, end: bool) -> pb_utils.InferenceRequest:
    def flag(name: str, on: bool) -> pb_utils.Tensor:
        return pb_utils.Tensor(name, np.array([[int(on)]], np.int32))

    return pb_utils.new_execute_request(
        inputs=[
            pb_utils.Tensor("INPUT", np.array([[value]], np.int32)),
            flag("START", start),
            flag("END", end),
            flag("READY", True),
        ],
        requested_output_names=["OUTPUT"],
        correlation_id=sequence_id,
    )


def test_sums_run_per_sequence_and_end_drops_them() -> None:
    module = import_model_file(MODEL_FILE, "simple_sequence")
    try:
        model = module.TritonPythonModel()
        model.initialize({"model_config": json.dumps({"name": "simple_sequence"})})
        outputs = []
        for sequence_id in range(1, 201):
            for step, value in enumerate((sequence_id, 2, 3)):
                (response,) = model.execute([_request(sequence_id, value, start=step == 0, end=step == 2)])
                outputs.append(int(pb_utils.get_output_tensor_by_name(response, "OUTPUT").as_numpy().flat[0]))
            assert len(model.sums) == 0, "a sum outlived its sequence's END"
        assert outputs[-3:] == [200, 202, 205]
        # a sequence left open keeps its sum until its END
        model.execute([_request(7, 5, start=True, end=False)])
        assert list(model.sums) == [7]
    finally:
        forget_module(module)
