"""How one `tcli infer --input NAME=VALUE` value becomes an array: a .npy or .json file, a JSON array
(or perf_analyzer's {"content": ..., "shape": ...}), or comma-separated literals, cast to the model's
data type only when no value changes. Errors are one line naming the input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tcli.errors import CliError


def read_file(name: str, path: Path) -> tuple[np.ndarray[Any, Any], list[int] | None]:
    if not path.is_file():
        raise CliError(f"--input {name}: file '{path}' not found")
    if path.suffix == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise CliError(f"--input {name}: '{path}' is not a readable .npy file: {exc}") from None
        return array, list(array.shape)
    if path.suffix == ".json":
        try:
            return from_json(json.loads(path.read_text(encoding="utf-8")))
        except ValueError as exc:
            raise CliError(f"--input {name}: '{path}' is not valid JSON: {exc}") from None
    raise CliError(f"--input {name}: '{path}' should be a .npy or .json file")


def from_json(data: Any) -> tuple[np.ndarray[Any, Any], list[int] | None]:
    """A JSON array (nested lists give the shape), or perf_analyzer's {"content": [...], "shape": [...]}."""
    shape: list[int] | None = None
    if isinstance(data, dict):
        if "shape" in data:
            shape = [int(d) for d in data["shape"]]
        data = data.get("content", data.get("data"))
        if data is None:
            raise ValueError('expected an array, or an object with "content" (and optionally "shape")')
    try:
        array = np.array(data)
    except ValueError:  # ragged nesting
        raise ValueError("nested lists of different lengths") from None
    if array.dtype.kind == "O":
        raise ValueError("nested lists of different lengths")
    return array, shape if shape is not None else (list(array.shape) if array.ndim > 1 else None)


def literals(name: str, value: str, datatype: str) -> np.ndarray[Any, Any]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    if datatype == "BOOL":
        truth = {"true": True, "1": True, "false": False, "0": False}
        try:
            return np.array([truth[v.lower()] for v in items], dtype=bool)
        except KeyError as exc:
            raise CliError(f"--input {name}: {exc.args[0]} is not a BOOL (true/false/1/0)") from None
    try:
        numbers = [int(v) if datatype.startswith(("INT", "UINT")) else float(v) for v in items]
    except ValueError:
        raise CliError(
            f"--input {name}: expected comma-separated {datatype} numbers, got '{value}'"
        ) from None
    return np.array(numbers)


def as_datatype(name: str, array: np.ndarray[Any, Any], datatype: str) -> np.ndarray[Any, Any]:
    """Cast to the model's type only when no value changes (1.5 is not an INT32, 300 not a UINT8)."""
    from server.protocol.datatypes import wire_to_numpy

    if datatype == "BYTES":
        flat = [v if isinstance(v, bytes) else str(v).encode() for v in array.reshape(-1).tolist()]
        return np.array(flat, dtype=object).reshape(array.shape)
    try:
        target = wire_to_numpy(datatype)
    except KeyError:
        raise CliError(
            f"--input {name}: data type {datatype} cannot be given from the command line"
        ) from None
    if array.dtype.kind not in "biuf":
        raise CliError(f"--input {name}: expected {datatype} numbers, got {array.dtype} values")
    if array.size == 0:
        return array.astype(target)
    if target.kind == "f":
        return array.astype(target)
    with np.errstate(invalid="ignore", over="ignore"):
        cast = array.astype(target)
        same = np.array_equal(cast.astype(np.float64), array.astype(np.float64))
    if not same:
        raise CliError(f"--input {name}: the values do not all fit {datatype} (whole numbers in range)")
    return cast
