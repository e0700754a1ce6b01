"""Doubles INPUT0 and counts its executions: COUNT is the count when the request ran, so an answer
from the response cache (the same request again) shows the count of the request it came from."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.count = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.count += 1
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            count = np.full((x.shape[0], 1), self.count, dtype=np.int64)
            outputs = [pb_utils.Tensor("OUTPUT0", x * 2), pb_utils.Tensor("COUNT", count)]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
