"""A model whose cost is known, for trying `tcli analyze`: each execution of n requests sleeps
34 + 8.5n ms, so batching and a second instance pay off in ways that can be worked out by hand
(tests/cli/test_analyze_cli.py does: the best config within a 99 ms p99 budget is 2 instances with
max batch size 4)."""

import time

import triton_python_backend_utils as pb_utils

BASE_MS = 34.0
PER_REQUEST_MS = 8.5


class TritonPythonModel:
    def execute(self, requests):
        time.sleep((BASE_MS + PER_REQUEST_MS * len(requests)) / 1000.0)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
            )
            for r in requests
        ]
