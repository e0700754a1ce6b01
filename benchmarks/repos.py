"""Model repositories the benchmark writes into a temporary directory: copies of the example models,
benchmark-specific configs (instances, threads, dynamic batching) written through Triton's own
ModelConfig protobuf, a batchable DenseNet made by editing the example graph's batch dimension, a
CPU-bound pure-Python model, a fixed-delay python model, and an ONNX model with one large initializer."""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from benchmarks.harness import ROOT

EXAMPLES = ROOT / "model_repository"
# the python-backend examples real Triton (python backend only) can serve beside tcli
PYTHON_EXAMPLES = ("add_sub", "repeat_int32", "simple_dyna_sequence")


# add_sub opted in to tcli's server process (TCLI_INSTANCE_PROCESS "false"; Triton ignores it)
IN_SERVER = "add_sub_in_server"


def copy_examples(repo: Path, names: tuple[str, ...] = PYTHON_EXAMPLES) -> None:
    """The examples named, and with add_sub its copy that runs in tcli's server process."""
    repo.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copytree(EXAMPLES / name, repo / name)
    if "add_sub" in names:
        shutil.copytree(EXAMPLES / "add_sub", repo / IN_SERVER)
        config = read_config(repo / IN_SERVER)
        config.name = IN_SERVER
        config.parameters["TCLI_INSTANCE_PROCESS"].string_value = "false"
        write_config(repo / IN_SERVER, config)


def read_config(model_dir: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse((model_dir / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


def write_config(model_dir: Path, config: model_config_pb2.ModelConfig) -> None:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))


# --- onnxruntime models -----------------------------------------------------------------------------


def batchable_onnx(source: Path) -> bytes:
    """The graph with a symbolic leading dimension on its real inputs and outputs. The example
    DenseNet pins batch 1 in its signature, but no node depends on it (no Reshape of the data)."""
    import onnx

    model = onnx.load(str(source))
    weights = {initializer.name for initializer in model.graph.initializer}
    values = [v for v in model.graph.input if v.name not in weights] + list(model.graph.output)
    for value in values:
        first = value.type.tensor_type.shape.dim[0]
        if not first.dim_param:
            first.ClearField("dim_value")
            first.dim_param = "batch"
    del model.graph.value_info[:]  # inferred shapes that may still say 1; onnxruntime re-infers them
    return bytes(model.SerializeToString())


@dataclass(frozen=True)
class OnnxServing:
    """How tcli serves an onnxruntime model in a scenario: the knobs Triton's config exposes."""

    max_batch_size: int = 0  # 0: no batching (the example DenseNet's own config)
    instances: int = 1
    intra_op_threads: int | None = None
    dynamic_batching: bool = False

    def describe(self) -> str:
        parts = [f"instances {self.instances}"]
        if self.intra_op_threads is not None:
            parts.append(f"intra_op_thread_count {self.intra_op_threads}")
        if self.max_batch_size:
            parts.append(f"max_batch_size {self.max_batch_size}")
        if self.dynamic_batching:
            parts.append("dynamic_batching {}")
        return ", ".join(parts)


def onnx_model(repo: Path, example: str, name: str, serving: OnnxServing) -> Path:
    """`example` from the example repository as `name`, served as `serving` says. Batching an
    example whose config has max_batch_size 0 (DenseNet) uses the batchable graph and drops the
    batch-1 reshapes; a remaining output reshape keeps the example's [1000] classifier dims."""
    source = EXAMPLES / example
    target = repo / name
    (target / "1").mkdir(parents=True)
    for extra in source.glob("*.txt"):
        shutil.copy(extra, target / extra.name)
    config = read_config(source)
    config.name = name
    model_file = source / "1" / "model.onnx"
    if serving.max_batch_size and config.max_batch_size == 0:
        (target / "1" / "model.onnx").write_bytes(batchable_onnx(model_file))
        for tensor in [*config.input, *config.output]:
            if tensor.HasField("reshape") and tensor.reshape.shape[:1] == [1]:
                # [1, 3, 224, 224] for dims [3, 224, 224]: the batch dim now carries the 1
                shape = list(tensor.reshape.shape[1:])
                tensor.ClearField("reshape")
                if shape != list(tensor.dims):
                    tensor.reshape.shape.extend(shape)
    else:
        shutil.copy(model_file, target / "1" / "model.onnx")
    if serving.max_batch_size:
        config.max_batch_size = serving.max_batch_size
    if serving.dynamic_batching:
        config.dynamic_batching.SetInParent()
    else:
        config.ClearField("dynamic_batching")
    del config.instance_group[:]
    config.instance_group.add(count=serving.instances, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
    if serving.intra_op_threads is not None:
        config.parameters["intra_op_thread_count"].string_value = str(serving.intra_op_threads)
    write_config(target, config)
    return target


def big_onnx_model(repo: Path, name: str, megabytes: int) -> Path:
    """An ONNX model whose one initializer holds `megabytes` MB of random FP32 values: VALUE =
    TABLE[INDEX]. A Gather on a request's index cannot be constant-folded away at load time, so
    the table stays resident while the model is loaded."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    count = megabytes * 2**20 // 4
    table = np.random.default_rng(0).random(count, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["TABLE", "INDEX"], ["VALUE"])],
        name,
        [helper.make_tensor_value_info("INDEX", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("VALUE", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(table, "TABLE")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    target = repo / name
    (target / "1").mkdir(parents=True)
    onnx.save(model, str(target / "1" / "model.onnx"))
    config = model_config_pb2.ModelConfig(name=name, platform="onnxruntime_onnx", max_batch_size=0)
    config.input.add(name="INDEX", data_type=model_config_pb2.TYPE_INT64, dims=[1])
    config.output.add(name="VALUE", data_type=model_config_pb2.TYPE_FP32, dims=[1])
    # one instance: Triton's default for onnxruntime on CPU is two, i.e. two copies of the table
    config.instance_group.add(count=1, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
    write_config(target, config)
    return target


# --- python models ----------------------------------------------------------------------------------

CPU_LOOP_MODEL = '''"""Benchmark model: a pure-Python loop of {loops} additions per request (about {ms:.1f} ms on the
machine that generated it), holding the GIL the whole time. OUT = IN."""

import triton_python_backend_utils as pb_utils

LOOPS = {loops}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            total = 0
            for i in range(LOOPS):
                total += i
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", value)]))
        return responses
'''


def loops_for(milliseconds: float) -> int:
    """How many iterations of the model's loop take `milliseconds` here (best of five)."""
    probe = 200_000
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        total = 0
        for i in range(probe):
            total += i
        best = min(best, time.perf_counter() - started)
    return max(1000, int(probe * milliseconds / 1000 / best))


def cpu_loop_model(repo: Path, name: str, loops: int, milliseconds: float, instances: int) -> Path:
    target = repo / name
    (target / "1").mkdir(parents=True)
    (target / "1" / "model.py").write_text(CPU_LOOP_MODEL.format(loops=loops, ms=milliseconds))
    config = model_config_pb2.ModelConfig(name=name, backend="python", max_batch_size=0)
    config.input.add(name="IN", data_type=model_config_pb2.TYPE_FP32, dims=[1])
    config.output.add(name="OUT", data_type=model_config_pb2.TYPE_FP32, dims=[1])
    config.instance_group.add(count=instances, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
    write_config(target, config)
    return target


DELAY_MODEL = '''"""Benchmark model: each request takes {ms:.1f} ms of wall time (a sleep, which holds no core and
no GIL), so what it costs the server does not drift with the machine's load. OUT = IN."""

import time

import triton_python_backend_utils as pb_utils

DELAY_S = {seconds!r}


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(DELAY_S)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())])
            for r in requests
        ]
'''


def delay_model(repo: Path, name: str, milliseconds: float, instances: int) -> Path:
    """A python model taking `milliseconds` of wall time per execution, on `instances` threads (a
    sleeping instance needs no process of its own: TCLI_INSTANCE_PROCESS false)."""
    target = repo / name
    (target / "1").mkdir(parents=True)
    (target / "1" / "model.py").write_text(DELAY_MODEL.format(ms=milliseconds, seconds=milliseconds / 1000))
    config = model_config_pb2.ModelConfig(name=name, backend="python", max_batch_size=0)
    config.input.add(name="IN", data_type=model_config_pb2.TYPE_FP32, dims=[1])
    config.output.add(name="OUT", data_type=model_config_pb2.TYPE_FP32, dims=[1])
    config.instance_group.add(count=instances, kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
    config.parameters["TCLI_INSTANCE_PROCESS"].string_value = "false"
    write_config(target, config)
    return target
