"""Tensors of the in-process API as `tritonserver`'s: DLPack both ways without a copy, each side holding
one reference to the other (as Triton's own test counts them), the tensor's shape read when it is
exported, BYTES in Triton's serialized form; an output memory type the server cannot serve refused
as Triton refuses it; outputs written into the buffers a MemoryAllocator gives (the request's, or one
of default_memory_allocators), its failure the response's error, as core's test_api.py has it; stop() with a request in flight raising as Triton's does; and the memory an
in-process server holds after thousands of inferences, measured as Triton's leak check measures it."""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tcli.inprocess as tritonserver
from tests.integration.conftest import link_repository
from tests.torch_needed import import_torch


def test_from_dlpack_and_back_share_memory_and_count_references() -> None:
    owner = np.ones(2**20)
    assert sys.getrefcount(owner) - 1 == 1
    tensor = tritonserver.Tensor.from_dlpack(owner)
    assert sys.getrefcount(owner) - 1 == 2  # the tensor's buffer holds its owner, once
    assert sys.getrefcount(tensor) - 1 == 1
    assert tensor.memory_buffer.owner is owner and tensor.data_ptr == owner.ctypes.data
    assert tensor.size == owner.nbytes and tensor.memory_type == tritonserver.MemoryType.CPU
    array = np.from_dlpack(tensor)
    assert array.ctypes.data == owner.ctypes.data  # no copy
    assert sys.getrefcount(tensor) - 1 == 2  # the array holds the tensor, once
    assert sys.getrefcount(array) - 1 == 1
    tensor.shape = [2, 2**19]  # a shape given later is the one the next export reads
    reshaped = np.from_dlpack(tensor)
    assert array.shape == (2**20,) and reshaped.shape == (2, 2**19)
    del owner, tensor, array, reshaped
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is tritonserver.Tensor]


def test_torch_reads_a_tensor_and_a_tensor_reads_torch_without_a_copy() -> None:
    torch = import_torch()
    source = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    tensor = tritonserver.Tensor.from_dlpack(source)
    assert tensor.data_type == tritonserver.DataType.FP32 and list(tensor.shape) == [3, 4]
    assert tensor.data_ptr == source.data_ptr()
    back = torch.from_dlpack(tensor)
    assert back.data_ptr() == source.data_ptr() and back.tolist() == source.tolist()
    buffer = tritonserver.MemoryBuffer.from_dlpack(source)
    assert buffer.data_ptr == source.data_ptr() and buffer.size == 48 and buffer.owner is source


def test_devices_and_bytes() -> None:
    tensor = tritonserver.Tensor.from_dlpack(np.arange(3, dtype=np.int32))
    assert tensor.to_host() is tensor and tensor.to_device((tritonserver.MemoryType.CPU, 0)) is tensor
    with pytest.raises(tritonserver.UnsupportedError, match="not supported"):
        tensor.to_device("gpu:0")
    with pytest.raises(tritonserver.InvalidArgumentError, match="Unsupported Memory Type String"):
        tensor.to_device("tpu")
    text = tritonserver.Tensor.from_string_array([["héllo", "x"]])
    assert text.data_type == tritonserver.DataType.BYTES and list(text.shape) == [1, 2]
    assert text.size == 4 + len("héllo".encode()) + 4 + 1  # Triton's serialized form: length, bytes
    assert text.to_string_array().tolist() == [["héllo", "x"]]
    with pytest.raises(tritonserver.InvalidArgumentError):
        np.from_dlpack(text)  # DLPack has no strings
    with pytest.raises(tritonserver.InvalidArgumentError, match="Unsupported conversion"):
        tritonserver.Tensor.from_bytes_array([1, 2])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tritonserver.Server]:
    repository = link_repository(tmp_path_factory.mktemp("tensors") / "models", ["add_sub", "repeat_int32"])
    with tritonserver.Server(model_repository=str(repository), exit_timeout=1) as started:
        yield started


INPUTS = {"INPUT0": np.arange(4, dtype=np.float32), "INPUT1": np.ones(4, np.float32)}


@pytest.mark.parametrize("memory_type", ["cpu", "cpu_pinned"])  # pinned memory is host memory too
def test_outputs_own_their_memory(server: tritonserver.Server, memory_type: str) -> None:
    (response,) = server.model("add_sub").infer(inputs=INPUTS, output_memory_type=memory_type)
    output = response.outputs["OUTPUT0"]
    assert isinstance(output.memory_buffer, tritonserver.MemoryBuffer)
    assert np.from_dlpack(output).tolist() == [1, 2, 3, 4]
    del response
    assert np.from_dlpack(output).tolist() == [1, 2, 3, 4]  # the tensor keeps its memory alive


@pytest.mark.parametrize("memory_type", ["unsupported", "gpu"])
def test_an_output_memory_type_the_server_cannot_serve(server: tritonserver.Server, memory_type: str) -> None:
    # tritonserver sends the request and refuses each response as it arrives, whatever raise_on_error
    responses = server.model("add_sub").infer(
        inputs=INPUTS, output_memory_type=memory_type, raise_on_error=False
    )
    with pytest.raises(tritonserver.InvalidArgumentError, match=f"Memory type {memory_type} not supported"):
        next(responses)


class RecordingAllocator(tritonserver.MemoryAllocator):
    """Host memory from numpy, each call and buffer remembered."""

    def __init__(self, spare: int = 0) -> None:
        self.calls: list[tuple[int, tritonserver.MemoryType, int]] = []
        self.owners: list[np.ndarray[Any, Any]] = []
        self.spare = spare  # bytes more than asked, as an allocator may give

    def allocate(
        self, size: int, memory_type: tritonserver.MemoryType, memory_type_id: int
    ) -> tritonserver.MemoryBuffer:
        self.calls.append((size, memory_type, memory_type_id))
        owner = np.full(size + self.spare, 0xAB, np.uint8)
        self.owners.append(owner)
        return tritonserver.MemoryBuffer.from_dlpack(owner)


def test_outputs_are_written_into_the_buffers_the_allocator_gives(server: tritonserver.Server) -> None:
    allocator = RecordingAllocator(spare=8)
    (response,) = server.model("add_sub").infer(inputs=INPUTS, output_memory_allocator=allocator)
    assert sorted(allocator.calls) == [(16, tritonserver.MemoryType.CPU, 0)] * 2  # 4 FP32 each
    for name, expected in (("OUTPUT0", [1, 2, 3, 4]), ("OUTPUT1", [-1, 0, 1, 2])):
        output = response.outputs[name]
        assert any(output.memory_buffer.owner is owner for owner in allocator.owners)
        assert output.data_ptr == output.memory_buffer.owner.ctypes.data and output.size == 16
        assert np.from_dlpack(output).tolist() == expected
        assert output.memory_buffer.owner[:16].view(np.float32).tolist() == expected  # in its memory
    # what the model asks is asked of the allocator; a custom one need not honour it (tritonserver's words)
    allocator = RecordingAllocator()
    (response,) = server.model("add_sub").infer(
        inputs=INPUTS, output_memory_type="gpu:1", output_memory_allocator=allocator
    )
    assert allocator.calls == [(16, tritonserver.MemoryType.GPU, 1)] * 2
    assert np.from_dlpack(response.outputs["OUTPUT0"]).tolist() == [1, 2, 3, 4]


def test_a_bytes_output_is_written_serialized(tmp_path: Path) -> None:
    repository = link_repository(tmp_path / "models", ["simple_identity"])
    allocator = RecordingAllocator()
    with tritonserver.Server(model_repository=str(repository)) as started:
        (response,) = started.model("simple_identity").infer(
            inputs={"INPUT0": np.array([["héllo", "x"]], dtype=object)}, output_memory_allocator=allocator
        )
    assert allocator.calls == [(4 + len("héllo".encode()) + 4 + 1, tritonserver.MemoryType.CPU, 0)]
    assert response.outputs["OUTPUT0"].to_string_array().tolist() == [["héllo", "x"]]


def test_default_memory_allocators_as_tritonservers(server: tritonserver.Server) -> None:
    cpu = tritonserver.default_memory_allocators[tritonserver.MemoryType.CPU]
    buffer = cpu.allocate(memory_type=tritonserver.MemoryType.CPU, memory_type_id=0, size=200)
    assert buffer.size == 200 and buffer.data_ptr == buffer.owner.ctypes.data
    tensor = tritonserver.Tensor(tritonserver.DataType.FP32, shape=[50], memory_buffer=buffer)
    view = np.from_dlpack(tensor)
    assert view.ctypes.data == buffer.owner.ctypes.data and view.dtype == np.float32 and view.nbytes == 200
    # an allocator put in its place is the one outputs go to
    replacement = RecordingAllocator()
    tritonserver.default_memory_allocators[tritonserver.MemoryType.CPU] = replacement
    try:
        (response,) = server.model("add_sub").infer(inputs=INPUTS)
    finally:
        tritonserver.default_memory_allocators[tritonserver.MemoryType.CPU] = cpu
    assert len(replacement.calls) == 2
    assert any(response.outputs["OUTPUT0"].memory_buffer.owner is owner for owner in replacement.owners)


class FailingAllocator(tritonserver.MemoryAllocator):
    def allocate(
        self, size: int, memory_type: tritonserver.MemoryType, memory_type_id: int
    ) -> tritonserver.MemoryBuffer:
        raise RuntimeError("foo")


def test_an_allocator_that_fails_fails_the_response(server: tritonserver.Server) -> None:
    with pytest.raises(tritonserver.InternalError, match="failure in allocator: foo"):
        list(server.model("add_sub").infer(inputs=INPUTS, output_memory_allocator=FailingAllocator()))
    (response,) = server.model("add_sub").infer(
        inputs=INPUTS, output_memory_allocator=FailingAllocator(), raise_on_error=False
    )
    assert isinstance(response.error, tritonserver.InternalError) and response.final


def test_an_allocator_giving_too_little_or_device_memory_is_refused(server: tritonserver.Server) -> None:
    class Small(RecordingAllocator):
        def allocate(self, size: int, memory_type: Any, memory_type_id: int) -> tritonserver.MemoryBuffer:
            return super().allocate(size - 1, memory_type, memory_type_id)

    class Device(RecordingAllocator):
        def allocate(self, size: int, memory_type: Any, memory_type_id: int) -> tritonserver.MemoryBuffer:
            buffer = super().allocate(size, memory_type, memory_type_id)
            buffer.memory_type = tritonserver.MemoryType.GPU
            return buffer

    with pytest.raises(tritonserver.InternalError, match="gave 15 bytes, the output needs 16"):
        list(server.model("add_sub").infer(inputs=INPUTS, output_memory_allocator=Small()))
    with pytest.raises(tritonserver.UnsupportedError, match="host memory only"):
        list(server.model("add_sub").infer(inputs=INPUTS, output_memory_allocator=Device()))
    with pytest.raises(tritonserver.InvalidArgumentError, match="allocate"):
        server.model("add_sub").infer(inputs=INPUTS, output_memory_allocator=object())


def test_stop_with_a_request_in_flight_raises_as_tritonserver(tmp_path: Path) -> None:
    repository = link_repository(tmp_path / "models", ["repeat_int32"])
    server = tritonserver.Server(model_repository=str(repository), exit_timeout=1).start(
        wait_until_ready=True
    )
    inputs = {
        "IN": np.array([1, 2], np.int32),
        "DELAY": np.array([0, 60000], np.uint32),  # the second response is a minute away
        "WAIT": np.zeros(1, np.uint32),
    }
    pending = server.model("repeat_int32").infer(inputs=inputs)
    next(pending)
    with pytest.raises(tritonserver.InternalError, match=r"Exit timeout expired\. Exiting immediately\."):
        server.stop()
    with pytest.raises(tritonserver.InvalidArgumentError, match="Server not started"):
        server.ready()  # stopped all the same
    with pytest.raises(tritonserver.UnavailableError):
        next(pending)


def _traced_growth(server: tritonserver.Server, count: int) -> int:
    """Triton's measure: bytes still traced after `count` inferences, from a collection just before."""
    model = server.model("add_sub")

    def run(times: int) -> None:
        for _ in range(times):
            inputs: dict[str, Any] = {
                "INPUT0": np.random.rand(4).astype(np.float32),
                "INPUT1": np.random.rand(4).astype(np.float32),
            }
            for response in model.infer(inputs=inputs, output_memory_type="cpu"):
                np.testing.assert_allclose(
                    np.from_dlpack(response.outputs["OUTPUT0"]),
                    inputs["INPUT0"] + inputs["INPUT1"],
                    rtol=1e-6,
                )

    run(50)  # the first calls fill caches that last (imports, numpy's tables)
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        run(count)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return after - before


@pytest.mark.parametrize("count", [200, 2000])
def test_thousands_of_inferences_hold_what_tritons_leak_check_allows(
    server: tritonserver.Server, count: int
) -> None:
    growth = _traced_growth(server, count)
    assert growth < 120_000, f"{growth} bytes still traced after {count} inferences"
