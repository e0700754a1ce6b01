"""digits_preprocess: turn 8-bit grey images into the tensor digits_onnx expects.

RAW_IMAGE: UINT8 [batch, 8, 8], intensities 0..255 with the ink bright (white digit on a
black background, like scikit-learn's digits scaled by 255/16).
IMAGE: FP32 [batch, 1, 8, 8], the same values as floats with a channel dimension added
(NCHW). Scaling to the network's range happens inside digits_onnx.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "RAW_IMAGE").as_numpy()
            if raw.ndim != 3 or raw.shape[1:] != (8, 8):
                error = pb_utils.TritonError(
                    f"RAW_IMAGE must have shape [batch, 8, 8], got {list(raw.shape)}",
                    pb_utils.TritonError.INVALID_ARG,
                )
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            image = raw.astype(np.float32)[:, np.newaxis, :, :]
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("IMAGE", image)]))
        return responses
