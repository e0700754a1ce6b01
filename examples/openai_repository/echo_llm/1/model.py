"""echo_llm: the words of the prompt back, as a language model in Triton's LLM conventions streams its
tokens (see config.pbtxt). Its "tokens" are words."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _input(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return default if tensor is None else tensor.as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            words = _input(request, "text_input", b"").decode().split()
            sampling = json.loads(_input(request, "sampling_parameters", b"{}") or "{}")
            stream = bool(_input(request, "stream", False))
            counts = bool(_input(request, "return_num_output_tokens", False))
            generated = words[: int(sampling.get("max_tokens", 16))]

            def response(text, count):
                outputs = [pb_utils.Tensor("text_output", np.array([text.encode()], dtype=object))]
                if counts:
                    outputs.append(pb_utils.Tensor("num_input_tokens", np.array([len(words)], np.int32)))
                    outputs.append(pb_utils.Tensor("num_output_tokens", np.array([count], np.int32)))
                return pb_utils.InferenceResponse(outputs)

            if not stream:
                sender.send(response(" ".join(generated), len(generated)), flags=FINAL)
                continue
            for index, word in enumerate(generated):
                if sender.is_cancelled():
                    break
                sender.send(response(word if index == 0 else " " + word, 1))
            sender.send(flags=FINAL)
        return None
