"""simple_sequence: a running INT32 sum per sequence.

Clients send one INPUT value ([1, 1] with the batch dimension) per request, tagged with a
sequence ID (correlation ID) and the sequence_start / sequence_end flags. The sequence
batcher adds two control tensors to every request it hands to this model:

* START (INT32 [1, 1]): 1 on the first request of a sequence, else 0;
* END (INT32 [1, 1]): 1 on the last request of a sequence, else 0;
* READY (INT32 [1, 1]): 1 if the row holds a real request, 0 for an idle batch slot.

For a row with READY = 1, this model computes, per correlation ID (request.correlation_id()):

* START = 1: sum = INPUT (the sequence starts again from this value);
* START = 0: sum = previous sum + INPUT (a sequence never seen before starts from 0);

and OUTPUT = sum, i.e. the sum of all INPUT values of the sequence so far, this one
included. So a sequence 0, 11, 7, 5 gives 0, 11, 18, 23. INT32 arithmetic wraps around.

A row with READY = 0 is an empty slot: its INPUT is meaningless, the sum is not touched and
OUTPUT is 0. The model gets one request per occupied sequence slot (up to max_batch_size per
execute call) and answers each from its own sequence's state, so sequences batched together
never mix. A sequence's sum is dropped on its END request, so memory follows the open
sequences, not every sequence ever seen; a client that never ends its sequences is bounded
too: only the most recently used MAX_SEQUENCES sums are kept, and an evicted sequence that
continues without START starts again from 0.
"""

from collections import OrderedDict

import numpy as np
import triton_python_backend_utils as pb_utils

MAX_SEQUENCES = 65536


def _flags(request, name, rows):
    """The control tensor `name` as one bool per row (absent means false)."""
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return np.zeros(rows, dtype=bool)
    values = tensor.as_numpy().reshape(-1)
    if values.size != rows:
        values = np.resize(values, rows)
    return values != 0


class TritonPythonModel:
    def initialize(self, args):
        self.sums = OrderedDict()

    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            rows = values.shape[0] if values.ndim else 1
            flat = values.reshape(rows, -1).astype(np.int32)
            start = _flags(request, "START", rows)
            end = _flags(request, "END", rows)
            ready = _flags(request, "READY", rows)
            output = np.zeros((rows, flat.shape[1]), dtype=np.int32)
            if ready.any():
                key = request.correlation_id()
                total = self.sums.pop(key, None)
                if total is None or total.shape != (flat.shape[1],):
                    total = np.zeros(flat.shape[1], dtype=np.int32)
                for row in range(rows):
                    if not ready[row]:
                        continue
                    total = flat[row].copy() if start[row] else (total + flat[row]).astype(np.int32)
                    output[row] = total
                if not (end & ready).any():
                    self.sums[key] = total
                while len(self.sums) > MAX_SEQUENCES:
                    self.sums.popitem(last=False)
            output = output.reshape(values.shape)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", output)]))
        return responses
