"""add_sub: element-wise sum and difference of two tensors.

For every request: OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1. The output
data types are read from the model configuration, so the same file serves an FP32 or an
INT32 variant of the config. Inputs of different shapes give an INVALID_ARG error for that
request only.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.output_dtypes = {}
        for name in ("OUTPUT0", "OUTPUT1"):
            output_config = pb_utils.get_output_config_by_name(config, name)
            self.output_dtypes[name] = pb_utils.triton_string_to_numpy(output_config["data_type"])

    def execute(self, requests):
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            if in0.shape != in1.shape:
                error = pb_utils.TritonError(
                    f"INPUT0 and INPUT1 must have the same shape, got {list(in0.shape)} and {list(in1.shape)}",
                    pb_utils.TritonError.INVALID_ARG,
                )
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            total = np.add(in0, in1).astype(self.output_dtypes["OUTPUT0"])
            difference = np.subtract(in0, in1).astype(self.output_dtypes["OUTPUT1"])
            responses.append(
                pb_utils.InferenceResponse(
                    output_tensors=[
                        pb_utils.Tensor("OUTPUT0", total),
                        pb_utils.Tensor("OUTPUT1", difference),
                    ]
                )
            )
        return responses
