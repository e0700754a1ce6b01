"""The Python-based backend 'scale' (--backend-directory backends): Y = X * FACTOR, FACTOR from each
model's config parameters. One file serves every model whose config says backend: "scale"."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.factor = float(config["parameters"]["FACTOR"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x * self.factor)]))
        return responses
