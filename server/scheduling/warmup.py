"""Model warmup: the `model_warmup` samples of a config run on every instance at load, before the
model is READY (Triton's TritonModelInstance::GenerateWarmupData and WarmUp).

A sample of batch_size N is N requests of one row each (a batching model's inputs get a leading 1),
handed to the instance together in one execution, `count` times (0 counts as 1); a sample of
batch_size 0 is skipped. Input data is zeros (`zero_data`), random bytes (`random_data`; strings
are empty, as Triton's), or the raw bytes of a file in the model's `warmup/` folder
(`input_data_file`; for TYPE_STRING the file holds length-prefixed strings). Random bytes are drawn
once per instance and reused by every iteration, as Triton does.

The samples run through the runner's own batch execution, so they are counted in the model's
statistics as Triton counts them. The first sample that fails any request fails the load with
Triton's message: "failed to run warmup sample '<name>': <error>; <error>; " (INVALID_ARG)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from server.config.validate import enum_name
from server.protocol import bytes_codec, datatypes
from server.protocol.errors import ErrorCode, TritonError
from server.protocol.types import InferenceRequest, Tensor
from server.scheduling.work import WorkItem

if TYPE_CHECKING:
    from collections.abc import Callable

    from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelWarmup

    from server.protocol.types import InferenceResponse

_LOG = logging.getLogger("tcli.scheduling")
WARMUP_FOLDER = "warmup"  # Triton's kWarmupDataFolder, beside the version folders


@dataclass(frozen=True)
class WarmupSample:
    """One `model_warmup` entry made into requests for one instance."""

    name: str
    count: int
    requests: list[InferenceRequest]


def warmup_samples(config: ModelConfig, model_dir: Path, version: str) -> list[WarmupSample]:
    """The config's warmup samples as requests; raises TritonError (INVALID_ARG) for a sample whose
    data cannot be made."""
    samples = []
    for setting in config.model_warmup:
        if setting.batch_size == 0:
            _LOG.debug("Skipping batch 0 warmup sample '%s'", setting.name)
            continue
        inputs = _sample_inputs(setting, config.max_batch_size > 0, model_dir)
        requests = [
            InferenceRequest(config.name, version, inputs=list(inputs)) for _ in range(setting.batch_size)
        ]
        samples.append(WarmupSample(setting.name, max(setting.count, 1), requests))
    return samples


def _sample_inputs(setting: ModelWarmup, batched: bool, model_dir: Path) -> list[Tensor]:
    tensors = []
    for name, spec in setting.inputs.items():
        dims = tuple(int(d) for d in spec.dims)
        if any(d < 0 for d in dims):
            raise TritonError(
                ErrorCode.INVALID_ARG,
                f"warmup setting expects all variable-size dimensions are specified for input '{name}'",
            )
        wire = datatypes.config_to_wire(enum_name(spec, "data_type"))
        elements = int(np.prod(dims, dtype=np.int64))
        source = spec.WhichOneof("input_data_type")
        if source is None:
            raise TritonError(
                ErrorCode.INVALID_ARG, f"warmup setting expects input '{name}' to have input_data_type set"
            )
        if wire == "BYTES":
            data = _string_data(source, spec.input_data_file, elements, model_dir)
        else:
            data = _numeric_data(source, spec.input_data_file, wire, elements, model_dir)
        shape = ((1,) if batched else ()) + dims
        tensors.append(Tensor(name, wire, shape, data.reshape(shape)))
    return tensors


def _numeric_data(source: str, file: str, wire: str, elements: int, model_dir: Path) -> np.ndarray[Any, Any]:
    dtype = datatypes.wire_to_numpy(wire)
    size = elements * dtype.itemsize
    if source == "zero_data":
        return np.zeros(elements, dtype)
    if source == "random_data":  # random bytes, whatever values they make (Triton's rand() bytes)
        raw = np.random.default_rng().integers(0, 256, size, dtype=np.uint8).tobytes()
        return np.frombuffer(raw, dtype).copy()
    raw = _read(model_dir, file)
    if len(raw) < size:
        raise TritonError(
            ErrorCode.INVALID_ARG,
            f"warmup setting expects {size} bytes, but the data provided from {file} only has {len(raw)} bytes",
        )
    return np.frombuffer(raw[:size], dtype).copy()


def _string_data(source: str, file: str, elements: int, model_dir: Path) -> np.ndarray[Any, Any]:
    if source != "input_data_file":  # zero and random strings are both empty strings in Triton
        return np.array([b""] * elements, dtype=np.object_)
    values = bytes_codec.deserialize(_read(model_dir, file), f"warmup data file {file}")
    if len(values) != elements:
        raise TritonError(
            ErrorCode.INVALID_ARG,
            f"warmup setting expects {elements} strings, but the data provided from {file} has {len(values)}",
        )
    return bytes_codec.object_array(values)


def _read(model_dir: Path, file: str) -> bytes:
    path = model_dir / WARMUP_FOLDER / file
    try:
        return path.read_bytes()
    except OSError as exc:
        raise TritonError(
            ErrorCode.INVALID_ARG, f"unable to read warmup file {path}: {exc.strerror}"
        ) from None


def warm_up(
    model: str, instance: str, samples: list[WarmupSample], run: Callable[[list[WorkItem]], None]
) -> None:
    """Run every sample `count` times through `run` (the instance's batch execution); raise the first
    failing sample's error in Triton's words."""
    for sample in samples:
        for iteration in range(1, sample.count + 1):
            _LOG.debug(
                "model '%s' instance %s is running warmup sample '%s' for iteration %d",
                model,
                instance,
                sample.name,
                iteration,
            )
            errors = _run_once(sample, run)
            if errors:
                _LOG.debug(
                    "model '%s' instance %s failed to run warmup sample '%s'", model, instance, sample.name
                )
                detail = "".join(f"{error}; " for error in errors)
                raise TritonError(
                    ErrorCode.INVALID_ARG, f"failed to run warmup sample '{sample.name}': {detail}"
                )


def _run_once(sample: WarmupSample, run: Callable[[list[WorkItem]], None]) -> list[str]:
    """One execution of the sample's requests; the error messages of those that failed."""
    pending = len(sample.requests)
    done = threading.Event()
    errors: list[str] = []
    lock = threading.Lock()

    def complete(result: InferenceResponse | TritonError) -> None:
        nonlocal pending
        with lock:
            if isinstance(result, TritonError):
                errors.append(result.message)
            pending -= 1
            if pending == 0:
                done.set()

    batch = [WorkItem(request, 1, complete) for request in sample.requests]
    run(batch)
    done.wait()  # a decoupled model may answer from its own threads after execute() returns; Triton waits too
    return errors
