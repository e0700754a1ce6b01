"""Input data for `tcli perf`, as perf_analyzer makes it: random (the default), zero, or read from a
JSON file in perf_analyzer's format:

    {"data": [ {"INPUT0": [1, 2, 3, 4], "INPUT1": {"content": [...], "shape": [4]}}, ... ]}
    {"data": [ [step, step, ...], [step, ...] ]}          several streams (one per sequence)

A value is a flat (or nested) list, {"content": [...], "shape": [...]}, or {"b64": "<raw bytes>"};
strings for BYTES inputs. Everything is turned into raw tensor bytes for one batch element here,
once, before any request is sent.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from server.protocol import datatypes
from tcli.errors import CliError
from tcli.perf.model import ModelInfo


@dataclass(frozen=True)
class TensorData:
    """One input for one batch element: its shape (no batch dimension) and raw bytes (BYTES inputs:
    Triton's 4-byte-length-prefixed serialization)."""

    datatype: str
    shape: tuple[int, ...]
    raw: bytes


Step = dict[str, TensorData]  # input name -> data, for one request of batch size 1
Stream = list[Step]  # the steps of one stream (a sequence reads one stream in order)


def _numpy_dtype(datatype: str) -> Any:
    return datatypes.raw_dtypes()[datatype]  # BF16: its raw 16-bit patterns; numpy has no bfloat16


def _serialize_strings(values: list[bytes]) -> bytes:
    from server.protocol import bytes_codec  # numpy: imported once data is made, not with the CLI

    return bytes_codec.serialize(values)


def synthetic(
    info: ModelInfo,
    shapes: dict[str, list[int]],
    kind: str,
    string_length: int = 128,
    string_data: str | None = None,
    seed: int = 0,
) -> list[Stream]:
    """One stream of one step: zeros, or random values (floats in [0, 1), integers in [0, 100),
    strings of `string_length` random letters, or `string_data` repeated)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    step: Step = {}
    for spec in info.inputs:
        shape = tuple(shapes[spec.name])
        count = math.prod(shape)
        if spec.datatype == "BYTES":
            if string_data is not None:
                values = [string_data.encode()] * count
            elif kind == "zero":
                values = [b"0" * string_length] * count  # perf_analyzer: zero data is '0' characters
            else:
                letters = rng.integers(97, 123, size=(count, string_length), dtype=np.uint8)
                values = [row.tobytes() for row in letters]
            step[spec.name] = TensorData("BYTES", shape, _serialize_strings(values))
            continue
        dtype = _numpy_dtype(spec.datatype)
        if kind == "zero":
            array = np.zeros(count, dtype=dtype)
        elif spec.datatype == "BOOL":
            array = rng.integers(0, 2, size=count).astype(dtype)
        elif dtype.kind == "f":
            array = rng.random(count).astype(dtype)
        else:
            array = rng.integers(0, 100, size=count).astype(dtype)
        step[spec.name] = TensorData(spec.datatype, shape, array.tobytes())
    return [[step]]


def from_json_file(path: Path, info: ModelInfo, shapes: dict[str, list[int]]) -> list[Stream]:
    """perf_analyzer's JSON input data: every step of every stream, encoded for batch size 1."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CliError(f"--input-data: file '{path}' not found") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CliError(f"--input-data: '{path}' is not a JSON file: {exc}") from None
    data = document.get("data") if isinstance(document, dict) else None
    if not isinstance(data, list) or not data:
        raise CliError(
            f"--input-data: '{path}' has no \"data\" list: expected "
            '{"data": [{"INPUT0": [...], ...}, ...]} as perf_analyzer reads it'
        )
    raw_streams = data if all(isinstance(item, list) for item in data) else [data]
    streams: list[Stream] = []
    for s, raw_steps in enumerate(raw_streams):
        stream: Stream = []
        for t, raw_step in enumerate(raw_steps):
            where = f"{path.name}: stream {s}, step {t}" if len(raw_streams) > 1 else f"{path.name}: step {t}"
            if not isinstance(raw_step, dict):
                raise CliError(f"--input-data {where}: expected an object of input names to values")
            stream.append(_step_from_json(raw_step, info, shapes, where))
        if not stream:
            raise CliError(f"--input-data {path.name}: stream {s} has no steps")
        streams.append(stream)
    return streams


def _step_from_json(
    raw_step: dict[str, Any], info: ModelInfo, shapes: dict[str, list[int]], where: str
) -> Step:
    import numpy as np

    step: Step = {}
    for spec in info.inputs:
        if spec.name not in raw_step:
            raise CliError(f"--input-data {where}: no data for input '{spec.name}'")
        value = raw_step[spec.name]
        shape: list[int] = list(shapes[spec.name])
        if isinstance(value, dict) and "shape" in value:
            given = [int(d) for d in value["shape"]]
            model_dims = spec.dims
            fits = len(given) == len(model_dims) and all(
                m in (-1, d) for m, d in zip(model_dims, given, strict=True)
            )
            if not fits:
                raise CliError(
                    f"--input-data {where}: shape {given} of '{spec.name}' does not fit the model's "
                    f"shape {model_dims}"
                )
            shape = given
        if any(d < 0 for d in shape):
            raise CliError(
                f"--input-data {where}: input '{spec.name}' has a variable shape {spec.dims}: give "
                f'"shape" beside "content" in the file, or --shape {spec.name}:d1,...'
            )
        count = math.prod(shape)
        if isinstance(value, dict) and "b64" in value:
            raw = base64.b64decode(value["b64"])
            if spec.datatype != "BYTES":
                known = datatypes.BY_WIRE.get(spec.datatype)
                expected = count * (known.size if known else 1)
                if len(raw) != expected:
                    raise CliError(
                        f"--input-data {where}: '{spec.name}' b64 data has {len(raw)} bytes, expected "
                        f"{expected} for {spec.datatype} {shape}"
                    )
            else:
                raw = _serialize_strings([raw])
            step[spec.name] = TensorData(spec.datatype, tuple(shape), raw)
            continue
        content = value.get("content") if isinstance(value, dict) else value
        if not isinstance(content, list):
            content = [content]
        flat = np.asarray(content, dtype=object).reshape(-1)
        if flat.size != count:
            raise CliError(
                f"--input-data {where}: '{spec.name}' has {flat.size} values, expected {count} for shape "
                f"{shape}"
            )
        if spec.datatype == "BYTES":
            values = [v if isinstance(v, bytes) else str(v).encode() for v in flat]
            step[spec.name] = TensorData("BYTES", tuple(shape), _serialize_strings(values))
            continue
        try:
            array = np.asarray(flat.tolist(), dtype=_numpy_dtype(spec.datatype))
        except (TypeError, ValueError, OverflowError) as exc:
            raise CliError(
                f"--input-data {where}: '{spec.name}' is not {spec.datatype} data: {exc}"
            ) from None
        step[spec.name] = TensorData(spec.datatype, tuple(shape), array.tobytes())
    return step
