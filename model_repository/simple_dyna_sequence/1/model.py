"""simple_dyna_sequence: the arithmetic of Triton's example model of this name, in Python.

Clients send one INPUT value ([1, 1] with the batch dimension) per request, tagged with a
sequence ID and the sequence_start / sequence_end flags. With the oldest strategy the sequence
batcher gathers requests of different sequences into one execute() call, one request per
sequence, and adds four control tensors to each (INT32 [1, 1] unless said otherwise):

* START: 1 on the first request of a sequence, else 0;
* END: 1 on the last request of a sequence, else 0;
* READY: 1 for a real request (always, with the oldest strategy);
* CORRID (UINT64 [1, 1]): the request's correlation ID.

OUTPUT = INPUT + START + (END ? CORRID : 0) for a ready row, 0 otherwise; INT32 arithmetic
wraps around. Nothing is kept from one request to the next: Triton's example client
(simple_grpc_sequence_stream_infer_client.py -d) sends 0, 11, 7, 5, 3, 2, 0, 1 on sequence
1000 and expects 1, 11, 7, 5, 3, 2, 0, 1001.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


def _column(request, name, rows, dtype):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return np.zeros(rows, dtype=dtype)
    return np.resize(tensor.as_numpy().reshape(-1), rows).astype(dtype)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            rows = values.shape[0] if values.ndim else 1
            flat = values.reshape(rows, -1).astype(np.int64)
            start = _column(request, "START", rows, np.int64)
            end = _column(request, "END", rows, np.int64)
            ready = _column(request, "READY", rows, np.int64)
            corrid = _column(request, "CORRID", rows, np.uint64).astype(np.int64, casting="unsafe")
            total = flat + (start + end * corrid)[:, None]
            total[ready == 0] = 0
            output = total.astype(np.int32).reshape(values.shape)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", output)]))
        return responses
