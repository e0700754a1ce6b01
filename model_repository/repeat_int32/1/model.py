"""repeat_int32: a decoupled model that answers each element of IN as its own response.

Inputs (no batching):

* IN (INT32 [n]): the values to send back, one response each; n = 0 sends no response at all;
* DELAY (UINT32 [n]): DELAY[i] milliseconds pass before response i is sent;
* WAIT (UINT32 [1]): execute() returns after WAIT milliseconds, whether or not every response
  was sent by then.

Response i carries OUT = [IN[i]] (INT32 [1]) and IDX = [i] (UINT32 [1]). After the last one
(or at once for an empty IN) the request's sender is closed with a flags-only
TRITONSERVER_RESPONSE_COMPLETE_FINAL. The responses are sent from a thread of this model, so
with WAIT smaller than the sum of DELAY, execute() returns early and the next request starts
while the previous one is still answering: the responses of several requests interleave, and
clients tell them apart by request id.

A DELAY whose shape differs from IN's gets one error response (INVALID_ARG), then the final flag.
If the client cancels the request (it closed the stream), the remaining responses are not sent.
"""

import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self._senders = set()
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy().reshape(-1)
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy().reshape(-1)
            sender = request.get_response_sender()
            if delays.shape != values.shape:
                error = pb_utils.TritonError(
                    f"DELAY must have the shape of IN: got {list(delays.shape)} for {list(values.shape)}",
                    pb_utils.TritonError.INVALID_ARG,
                )
                sender.send(
                    pb_utils.InferenceResponse(error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            with self._lock:
                self._senders.add(sender)
            worker = threading.Thread(target=self._respond, args=(sender, values, delays), daemon=True)
            worker.start()
            if wait.size and wait[0]:
                time.sleep(int(wait[0]) / 1000)
        return None

    def _respond(self, sender, values, delays):
        try:
            for index, (value, delay) in enumerate(zip(values.tolist(), delays.tolist(), strict=True)):
                if delay:
                    time.sleep(delay / 1000)
                if sender.is_cancelled():
                    break
                outputs = [
                    pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                    pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
                ]
                sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
        finally:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            with self._lock:
                self._senders.discard(sender)
                self._idle.notify_all()

    def finalize(self):
        # let the requests still answering finish (their responses are short)
        with self._lock:
            self._idle.wait_for(lambda: not self._senders, timeout=10)
