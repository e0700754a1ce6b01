"""The binary frames of the inference path between the server and a python instance's process: a batch
going in (EXEC), its results coming back (DONE) and a response a response sender sends (SEND).

No pickle here: a fixed header, then per request or result a small struct and its tensors'
descriptors (name, datatype, shape, and where the bytes are: in the frame itself, or at an offset of
the input arena or output ring of `shm`). Both sides read the frames with `struct` and hand numpy
views of the frame's own buffer to the model or the front end: a request is decoded once, into the
form the instance reads.

Every frame rides in a `multiprocessing.connection.Connection` message, beside the pickled control
messages (start, stop, calls, logs), which always begin with pickle's PROTO opcode 0x80; a frame's
first byte is its kind, below that. A malformed frame (torn, truncated, or garbage) raises
`FrameError`, never anything else and never a hang: the decoder is fuzzed
(tests/unit/test_hop_frames.py). Its fixed head alone (`exec_head`, `results_head`) still names the
requests it carried, which the reader then fails.

Layout (little-endian):
    EXEC   kind u8, batch id u32, requests u16, senders u8, arena name (u16 length + utf-8),
           then per request: id, parameters (JSON, empty for none), requested outputs (u16 count,
           each a u16-length name), inputs (u16 count, each a tensor)
    DONE   kind u8, batch id u32, index u16 (0), final u8 (0), ring end i64 (-1: none),
    SEND   results u16, then per result a tag u8 and its body: a response (id, parameters,
           u16 count of tensors), an error (code u8, message) or the model's error (code, message,
           traceback); no body for "answered through its sender" and "rescheduled"
    tensor name (u16 length), datatype u8, ndim u8, place u8 (0: bytes follow, 1: at an offset of the
           shared segment), dims (ndim x i64), byte size u64, then the bytes or their offset u64
Strings are a u32 length and utf-8 unless said otherwise.
"""

from __future__ import annotations

import functools
import json
import math
import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from server.backends.base import ModelError, Rescheduled
from server.backends.python.shm import INLINE_LIMIT
from server.protocol import bytes_codec, datatypes
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceResponse, RequestedOutput, Tensor

if TYPE_CHECKING:
    from server.protocol.types import InferenceRequest

EXEC, DONE, SEND = 1, 2, 3

# a frame numbers datatypes from 0 in TRITONSERVER_DataType order
DATATYPES: tuple[str, ...] = datatypes.WIRE_TYPE_NAMES
_DATATYPE_INDEX = {name: index for index, name in enumerate(DATATYPES)}
# BF16 travels as its raw 16-bit values; BYTES as Triton's serialized elements
_RAW = datatypes.raw_dtypes()
_NUMPY = [_RAW.get(name, np.dtype(object)) for name in DATATYPES]
_BYTES = _DATATYPE_INDEX["BYTES"]
_CODES = tuple(ErrorCode)
_CODE_INDEX = {code: index for index, code in enumerate(_CODES)}

_EXEC_HEAD = struct.Struct("<BIHBH")
_RESULTS_HEAD = struct.Struct("<BIHBqH")
_REQUEST = struct.Struct("<IIHH")  # id, parameters, outputs, inputs
_RESPONSE = struct.Struct("<IIH")  # id, parameters, tensors
_ERROR = struct.Struct("<BI")
_MODEL_ERROR = struct.Struct("<BII")
_TENSOR = struct.Struct("<HBBB")
_U16 = struct.Struct("<H")
_U64 = struct.Struct("<Q")
_SIZES = struct.Struct("<QQ")

# result tags
_NONE, _RESPONSE_TAG, _ERROR_TAG, _MODEL_ERROR_TAG, _RESCHEDULED = range(5)

Result = InferenceResponse | TritonError | None


class FrameError(ValueError):
    """A frame that does not decode: the peer is broken or the message was torn."""


class Placement(Protocol):
    """Where a message's large tensors go: `place(arrays)` copies them into a shared segment and gives
    each one's offset there, the segment's name and the position the reader frees once it has read
    them; (None, None, None) when the tensors ride in the frame itself."""

    def place(
        self, arrays: Sequence[np.ndarray[Any, Any]]
    ) -> tuple[list[int] | None, str | None, int | None]: ...


class _Inline:
    def place(
        self, arrays: Sequence[np.ndarray[Any, Any]]
    ) -> tuple[list[int] | None, str | None, int | None]:
        return None, None, None


INLINE: Placement = _Inline()  # every tensor in the frame


# ---------------------------------------------------------------------------------------- encoding
def _text(value: str) -> bytes:
    return value.encode("utf-8", "surrogatepass")


def _json(parameters: dict[str, Any]) -> bytes:
    return json.dumps(parameters).encode() if parameters else b""


# request parameters the front ends consume, which an instance never reads
_FRONT_END_ONLY = ("binary_data_output", "headers")


def _request_parameters(parameters: dict[str, Any]) -> bytes:
    if not parameters:
        return b""
    if any(key in parameters for key in _FRONT_END_ONLY):
        parameters = {k: v for k, v in parameters.items() if k not in _FRONT_END_ONLY}
    return _json(parameters)


def _flat(tensor: Tensor) -> np.ndarray[Any, Any]:
    """The tensor's bytes as one contiguous array (BYTES serialized, whatever numpy holds them: the
    datatype says how the other side reads them, not the array's dtype)."""
    data = tensor.data
    if tensor.datatype == "BYTES":
        return np.frombuffer(bytes_codec.serialize(data), np.uint8)
    return np.ascontiguousarray(data)


# a model's tensors come in few names and shapes: their descriptors are kept, encoded and decoded
_CACHED = 512
_MOST_ELEMENTS = 1 << 48
_HEADS: dict[tuple[str, str, tuple[int, ...], int], bytes] = {}
_DESCRIPTORS: dict[bytes, tuple[str, int, tuple[int, ...], int]] = {}


@functools.cache
def _dims(ndim: int) -> struct.Struct:
    return struct.Struct(f"<{ndim}q")


def _head(tensor: Tensor, shared: int) -> bytes:
    key = (tensor.name, tensor.datatype, tensor.data.shape, shared)
    head = _HEADS.get(key)
    if head is None:
        head = _HEADS[key] = _new_head(tensor, shared)
        if len(_HEADS) > _CACHED:
            _HEADS.pop(next(iter(_HEADS)))
    return head


def _new_head(tensor: Tensor, shared: int) -> bytes:
    datatype = _DATATYPE_INDEX.get(tensor.datatype)
    if datatype is None:
        raise FrameError(f"tensor '{tensor.name}' has an unknown datatype '{tensor.datatype}'")
    name = _text(tensor.name)
    shape = tensor.data.shape
    return _TENSOR.pack(len(name), datatype, len(shape), shared) + name + _dims(len(shape)).pack(*shape)


def _encoded(tensors: Sequence[Tensor], placement: Placement) -> tuple[list[bytes], str | None, int | None]:
    """Each tensor's encoding, the shared segment's name and the position to free (see Placement)."""
    if not tensors:
        return [], None, None
    if all(t.datatype != "BYTES" for t in tensors) and sum(t.data.nbytes for t in tensors) <= INLINE_LIMIT:
        # small: in the frame (tobytes copies any layout in C order)
        encoded = []
        for tensor in tensors:
            data = tensor.data
            encoded.append(b"".join((_head(tensor, 0), _U64.pack(data.nbytes), data.tobytes())))
        return encoded, None, None
    arrays = [_flat(t) for t in tensors]
    offsets, segment, end = placement.place(arrays)
    if offsets is None:
        return (
            [_head(t, 0) + _U64.pack(a.nbytes) + a.tobytes() for t, a in zip(tensors, arrays, strict=True)],
            None,
            None,
        )
    heads = [_head(t, 1) for t in tensors]
    return (
        [h + _SIZES.pack(a.nbytes, o) for h, a, o in zip(heads, arrays, offsets, strict=True)],
        segment,
        end,
    )


def encode_exec(
    batch_id: int, requests: Sequence[InferenceRequest], senders: bool, placement: Placement
) -> bytes:
    """A batch for the instance process; its inputs in the frame, or when large in the input arena
    (`placement`)."""
    tensors, segment, _ = _encoded([t for r in requests for t in r.inputs], placement)
    arena = _text(segment or "")
    parts = [_EXEC_HEAD.pack(EXEC, batch_id, len(requests), 1 if senders else 0, len(arena)), arena]
    cursor = 0
    for request in requests:
        request_id, parameters = _text(request.id), _request_parameters(request.parameters)
        parts.append(
            _REQUEST.pack(len(request_id), len(parameters), len(request.outputs), len(request.inputs))
        )
        parts.append(request_id)
        parts.append(parameters)
        for output in request.outputs:
            name = _text(output.name)
            parts.append(_U16.pack(len(name)))
            parts.append(name)
        parts += tensors[cursor : cursor + len(request.inputs)]
        cursor += len(request.inputs)
    return b"".join(parts)


def encode_results(
    kind: int, batch_id: int, index: int, final: bool, results: Sequence[Result], placement: Placement
) -> bytes:
    """DONE (a batch's results) or SEND (one response of a sender); large tensors go to the output
    ring (`placement`), all of a message's at once, so that the reader frees them at once."""
    tensors, _, end = _encoded(
        [t for r in results if isinstance(r, InferenceResponse) for t in r.outputs], placement
    )
    parts = [
        _RESULTS_HEAD.pack(kind, batch_id, index, 1 if final else 0, -1 if end is None else end, len(results))
    ]
    cursor = 0
    for result in results:
        if result is None:
            parts.append(bytes((_NONE,)))
        elif isinstance(result, Rescheduled):
            parts.append(bytes((_RESCHEDULED,)))
        elif isinstance(result, ModelError):
            message, trace = _text(result.message), _text(result.trace)
            parts.append(bytes((_MODEL_ERROR_TAG,)))
            parts += (_MODEL_ERROR.pack(_CODE_INDEX[result.code], len(message), len(trace)), message, trace)
        elif isinstance(result, TritonError):
            message = _text(result.message)
            parts += (bytes((_ERROR_TAG,)), _ERROR.pack(_CODE_INDEX[result.code], len(message)), message)
        else:
            request_id, parameters = _text(result.id), _json(result.parameters)
            parts.append(bytes((_RESPONSE_TAG,)))
            parts += (
                _RESPONSE.pack(len(request_id), len(parameters), len(result.outputs)),
                request_id,
                parameters,
            )
            parts += tensors[cursor : cursor + len(result.outputs)]
            cursor += len(result.outputs)
    return b"".join(parts)


# ---------------------------------------------------------------------------------------- decoding
class _Reader:
    """A cursor over one frame; every read checks its bounds."""

    __slots__ = ("buffer", "end", "position")

    def __init__(self, buffer: memoryview, position: int = 0) -> None:
        self.buffer = buffer
        self.position = position
        self.end = len(buffer)

    def take(self, size: int) -> int:
        """The start of the next `size` bytes, moving past them."""
        start = self.position
        if size < 0 or start + size > self.end:
            raise FrameError(f"frame cut short: {size} bytes wanted at {start} of {self.end}")
        self.position = start + size
        return start

    def unpack(self, shape: struct.Struct) -> tuple[Any, ...]:
        return shape.unpack_from(self.buffer, self.take(shape.size))

    def text(self, size: int) -> str:
        if not size:
            return ""
        start = self.take(size)
        try:
            return str(self.buffer[start : start + size], "utf-8", "surrogatepass")
        except UnicodeDecodeError as exc:
            raise FrameError(f"text that is not utf-8 at {start}") from exc

    def parameters(self, size: int) -> dict[str, Any]:
        if not size:
            return {}
        start = self.take(size)
        try:
            value = json.loads(bytes(self.buffer[start : start + size]))
        except ValueError as exc:
            raise FrameError(f"parameters that are not JSON at {start}") from exc
        if not isinstance(value, dict):
            raise FrameError(f"parameters that are not a JSON object at {start}")
        return value

    def tensor(self, segment: Callable[[], memoryview | None]) -> Tensor:
        buffer, start = self.buffer, self.position
        name_size, datatype, ndim, place = _TENSOR.unpack_from(buffer, self.take(_TENSOR.size))
        # the descriptor and the size after it (u64) checked at once: every request reads these
        head_end = start + _TENSOR.size + name_size + 8 * ndim
        if head_end + 8 > self.end:
            raise FrameError(f"frame cut short: a tensor descriptor at {start} runs past {self.end}")
        head = bytes(buffer[start:head_end])
        known = _DESCRIPTORS.get(head)
        if known is None:
            known = _descriptor(head, name_size, datatype, ndim)
            _DESCRIPTORS[head] = known
            if len(_DESCRIPTORS) > _CACHED:
                _DESCRIPTORS.pop(next(iter(_DESCRIPTORS)))
        name, datatype, shape, count = known
        if place == 0:
            (nbytes,) = _U64.unpack_from(buffer, head_end)
            self.position = head_end + 8
            source, start = buffer, self.take(nbytes)
        elif place == 1:
            self.position = head_end
            nbytes, start = _SIZES.unpack_from(buffer, self.take(16))
            shared = segment()
            if shared is None or start + nbytes > len(shared):
                raise FrameError(f"tensor '{name}' lies outside its shared segment")
            source = shared
        else:
            raise FrameError(f"tensor '{name}' has place {place}")
        if datatype == _BYTES:
            return Tensor(
                name, "BYTES", shape, _bytes_array(source[start : start + nbytes], name, count, shape)
            )
        dtype = _NUMPY[datatype]
        if count * dtype.itemsize != nbytes:
            raise FrameError(f"tensor '{name}' has {nbytes} bytes for shape {list(shape)}")
        data = np.frombuffer(source, dtype, count, start)
        if place == 1:  # the segment is reused once read: a copy
            data = data.copy()
        # else a view of the frame, which is the receiver's own (writable) buffer
        return Tensor(name, DATATYPES[datatype], shape, data.reshape(shape) if len(shape) != 1 else data)


def _descriptor(
    head: bytes, name_size: int, datatype: int, ndim: int
) -> tuple[str, int, tuple[int, ...], int]:
    """(name, datatype number, shape, element count) of a tensor descriptor's checked head."""
    try:
        name = str(head[_TENSOR.size : _TENSOR.size + name_size], "utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise FrameError("a tensor name that is not utf-8") from None
    if datatype >= len(DATATYPES):
        raise FrameError(f"tensor '{name}' has datatype number {datatype}")
    shape = _dims(ndim).unpack_from(head, _TENSOR.size + name_size)
    if any(d < 0 for d in shape):
        raise FrameError(f"tensor '{name}' has a negative dimension")
    if math.prod(d for d in shape if d) >= _MOST_ELEMENTS:  # numpy could not even shape it
        raise FrameError(f"tensor '{name}' has shape {list(shape)}, too large for any array")
    return name, datatype, shape, math.prod(shape)


def _bytes_array(view: memoryview, name: str, count: int, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    try:
        elements = bytes_codec.deserialize(view, f"tensor '{name}'")
    except bytes_codec.BytesFormatError as exc:
        raise FrameError(exc.message) from None
    if len(elements) != count:
        raise FrameError(f"tensor '{name}' has {len(elements)} elements for shape {list(shape)}")
    return bytes_codec.object_array(elements, shape)


def kind_of(frame: bytes | bytearray | memoryview) -> int:
    """EXEC, DONE or SEND for a frame of this module; 0 for anything else (a pickled message)."""
    return frame[0] if len(frame) and frame[0] in (EXEC, DONE, SEND) else 0


class ExecBatch:
    __slots__ = ("arena", "batch_id", "requests", "senders")

    def __init__(
        self, batch_id: int, senders: bool, arena: str | None, requests: list[DecodedRequest]
    ) -> None:
        self.batch_id = batch_id
        self.senders = senders
        self.arena = arena
        self.requests = requests


class DecodedRequest:
    """One request of an EXEC frame, before its inputs are read (the arena may need attaching)."""

    __slots__ = ("id", "inputs", "outputs", "parameters")

    def __init__(
        self,
        request_id: str,
        parameters: dict[str, Any],
        outputs: list[RequestedOutput],
        inputs: list[Tensor],
    ) -> None:
        self.id = request_id
        self.parameters = parameters
        self.outputs = outputs
        self.inputs = inputs


def decode_exec(
    frame: bytearray | memoryview, attach: Callable[[str | None], memoryview | None]
) -> ExecBatch:
    """An EXEC frame: its inputs are views of `frame` (keep it) or copies out of the input arena,
    which `attach(name)` maps."""
    try:
        reader = _Reader(memoryview(frame))
        kind, batch_id, count, senders, arena_size = reader.unpack(_EXEC_HEAD)
        if kind != EXEC:
            raise FrameError(f"frame of kind {kind} where a batch was expected")
        arena_name = reader.text(arena_size) or None

        def arena() -> memoryview | None:
            try:
                return attach(arena_name)
            except (OSError, ValueError) as exc:
                raise FrameError(f"input arena '{arena_name}' cannot be mapped: {exc}") from None

        requests = []
        for _ in range(count):
            id_size, parameters_size, output_count, input_count = reader.unpack(_REQUEST)
            request_id = reader.text(id_size)
            parameters = reader.parameters(parameters_size)
            outputs = [RequestedOutput(reader.text(reader.unpack(_U16)[0])) for _ in range(output_count)]
            inputs = [reader.tensor(arena) for _ in range(input_count)]
            requests.append(DecodedRequest(request_id, parameters, outputs, inputs))
        if reader.position != reader.end:
            raise FrameError(f"{reader.end - reader.position} bytes after the last request")
        return ExecBatch(batch_id, bool(senders), arena_name, requests)
    except struct.error as exc:  # a count that runs past the frame
        raise FrameError(str(exc)) from None


class Results:
    __slots__ = ("batch_id", "end", "final", "index", "kind", "results")

    def __init__(
        self, kind: int, batch_id: int, index: int, final: bool, end: int | None, results: list[Result]
    ) -> None:
        self.kind = kind
        self.batch_id = batch_id
        self.index = index
        self.final = final
        self.end = end
        self.results = results


def exec_head(frame: bytes | bytearray | memoryview) -> tuple[int, int] | None:
    """(batch id, request count) of an EXEC frame, read from its fixed head alone, whatever follows
    it; None for a frame too short to hold one or of another kind."""
    if len(frame) < _EXEC_HEAD.size or frame[0] != EXEC:
        return None
    _, batch_id, count, _, _ = _EXEC_HEAD.unpack_from(frame)
    return batch_id, count


def results_head(frame: bytes | bytearray | memoryview) -> tuple[int, int, int] | None:
    """(kind, batch id, index) of a DONE or SEND frame, read from its fixed head alone, whatever
    follows it; None for a frame too short to hold one or of another kind."""
    if len(frame) < _RESULTS_HEAD.size or frame[0] not in (DONE, SEND):
        return None
    kind, batch_id, index, _, _, _ = _RESULTS_HEAD.unpack_from(frame)
    return kind, batch_id, index


def ring_end(frame: bytes | bytearray | memoryview) -> int | None:
    """The ring position a DONE or SEND frame frees, read from its head alone (None: no ring space,
    or a frame too short to say)."""
    if len(frame) < _RESULTS_HEAD.size:
        return None
    end = _RESULTS_HEAD.unpack_from(frame)[4]
    return None if end < 0 else end


def decode_results(
    frame: bytearray | memoryview,
    ring: Callable[[], memoryview | None],
    model_name: str,
    model_version: str,
) -> Results:
    """A DONE or SEND frame; shared tensors are copied out of the output ring `ring()` maps (freed
    once this returns)."""
    try:
        reader = _Reader(memoryview(frame))
        kind, batch_id, index, final, end, count = reader.unpack(_RESULTS_HEAD)
        if kind not in (DONE, SEND):
            raise FrameError(f"frame of kind {kind} where results were expected")
        results: list[Result] = []
        for _ in range(count):
            tag = reader.buffer[reader.take(1)]
            if tag == _NONE:
                results.append(None)
            elif tag == _RESCHEDULED:
                results.append(Rescheduled())
            elif tag == _ERROR_TAG:
                code, size = reader.unpack(_ERROR)
                results.append(TritonError(_code(code), reader.text(size)))
            elif tag == _MODEL_ERROR_TAG:
                code, size, trace_size = reader.unpack(_MODEL_ERROR)
                message = reader.text(size)
                results.append(ModelError(message, reader.text(trace_size), _code(code)))
            elif tag == _RESPONSE_TAG:
                id_size, parameters_size, tensor_count = reader.unpack(_RESPONSE)
                request_id = reader.text(id_size)
                parameters = reader.parameters(parameters_size)
                outputs = [reader.tensor(ring) for _ in range(tensor_count)]
                results.append(InferenceResponse(model_name, model_version, request_id, outputs, parameters))
            else:
                raise FrameError(f"result tag {tag}")
        if reader.position != reader.end:
            raise FrameError(f"{reader.end - reader.position} bytes after the last result")
        return Results(kind, batch_id, index, bool(final), None if end < 0 else end, results)
    except struct.error as exc:
        raise FrameError(str(exc)) from None


def _code(index: int) -> ErrorCode:
    if index >= len(_CODES):
        raise FrameError(f"error code number {index}")
    return _CODES[index]
