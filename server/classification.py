"""Triton's classification extension: an output asked for with `classification: K` comes back as BYTES
strings "<value>:<index>[:<label>]", the K largest values per batch item, largest first."""

from __future__ import annotations

from typing import Any

import numpy as np

from server.protocol.errors import invalid_arg
from server.protocol.types import Tensor

_SUPPORTED = {"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64"}
_MAX_ELEMENTS = 1_000_000


def _format(value: Any, floating: bool) -> str:
    # C++ std::to_string: six decimals for floating point, plain digits for integers
    return f"{float(value):.6f}" if floating else str(int(value))


def classify(tensor: Tensor, count: int, labels: list[str] | None, batched: bool) -> Tensor:
    if tensor.datatype not in _SUPPORTED:
        raise invalid_arg(
            f"class result not available for output due to unsupported type '{tensor.datatype}'"
        )
    data = np.asarray(tensor.data)
    if data.size > _MAX_ELEMENTS:
        raise invalid_arg("classification output tensor too large")
    rows = data.reshape(data.shape[0], -1) if batched and data.ndim > 0 else data.reshape(1, -1)
    k = min(count, rows.shape[1])
    floating = tensor.datatype in ("FP32", "FP64")
    result = []
    for row in rows:
        order = np.argsort(-row.astype(np.float64), kind="stable")[:k]
        for index in order:
            text = f"{_format(row[index], floating)}:{int(index)}"
            if labels is not None and index < len(labels):
                text += f":{labels[index]}"
            result.append(text.encode())
    shape = (rows.shape[0], k) if batched else (k,)
    return Tensor(tensor.name, "BYTES", shape, np.array(result, dtype=object).reshape(shape))
