"""Create a model folder from a model file: config.pbtxt derived from the file, the file in version 1.

ONNX files describe their own tensors; TorchScript and python models need tensor specs from the user
(`NAME:TYPE:DIMS`, e.g. `INPUT__0:FP32:1,8,8`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from server.protocol import datatypes
from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

DEFAULT_MAX_BATCH_SIZE = 4  # what Triton's onnxruntime auto-complete picks


@dataclass(frozen=True)
class TensorArg:
    name: str
    data_type: str  # config enum name, TYPE_FP32
    dims: tuple[int, ...]


def parse_tensor_arg(text: str) -> TensorArg:
    """'INPUT__0:FP32:1,8,8' (wire or TYPE_ names; -1 for a variable dimension)."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[0]:
        raise TritonError(
            ErrorCode.INVALID_ARG,
            f"tensor spec '{text}' is not NAME:TYPE:DIMS (for example INPUT__0:FP32:3,224,224)",
        )
    name, type_name, dims_text = parts
    type_name = type_name.upper()
    config_type = type_name if type_name.startswith("TYPE_") else datatypes.wire_to_config(type_name)
    if type_name == "STRING":
        config_type = "TYPE_STRING"
    if config_type not in datatypes.CONFIG_TYPE_NAMES:
        raise TritonError(
            ErrorCode.INVALID_ARG,
            f"tensor spec '{text}': unknown data type '{type_name}'; use one of "
            f"{', '.join(datatypes.WIRE_TYPE_NAMES)}",
        )
    try:
        dims = tuple(int(d) for d in dims_text.split(",") if d.strip())
    except ValueError:
        raise TritonError(
            ErrorCode.INVALID_ARG, f"tensor spec '{text}': dims must be integers separated by commas"
        ) from None
    if not dims or any(d == 0 or d < -1 for d in dims):
        raise TritonError(
            ErrorCode.INVALID_ARG, f"tensor spec '{text}': dims must be positive integers or -1"
        )
    return TensorArg(name, config_type, dims)


@dataclass(frozen=True)
class ScaffoldOptions:
    name: str
    max_batch_size: int | None = None  # None: derive from the model file where it can
    dynamic_batching: bool | None = None  # None: on when max_batch_size > 1
    instance_count: int = 1
    instance_kind: str = "KIND_CPU"
    inputs: tuple[TensorArg, ...] = ()
    outputs: tuple[TensorArg, ...] = ()


def config_for_onnx(model_file: Path, options: ScaffoldOptions) -> ModelConfig:
    from server.backends.onnx_signature import read_onnx_signature

    signature = read_onnx_signature(model_file)
    batching = signature.supports_batching
    max_batch = options.max_batch_size
    if max_batch is None:
        max_batch = DEFAULT_MAX_BATCH_SIZE if batching else 0
    if max_batch > 0 and not batching:
        raise TritonError(
            ErrorCode.INVALID_ARG,
            f"{model_file.name} has a fixed first dimension, so it cannot batch: use --max-batch-size 0",
        )
    inputs = options.inputs or tuple(
        TensorArg(s.name, s.data_type, s.shape[1:] if max_batch > 0 else s.shape) for s in signature.inputs
    )
    outputs = options.outputs or tuple(
        TensorArg(s.name, s.data_type, s.shape[1:] if max_batch > 0 else s.shape) for s in signature.outputs
    )
    return _build(options, "onnxruntime_onnx", "", max_batch, inputs, outputs)


def config_for_torchscript(options: ScaffoldOptions) -> ModelConfig:
    if not options.inputs or not options.outputs:
        raise TritonError(
            ErrorCode.INVALID_ARG,
            "a TorchScript file does not record its tensor shapes: give --input and --output specs, "
            "e.g. --input INPUT__0:FP32:3,224,224 --output OUTPUT__0:FP32:1000",
        )
    max_batch = DEFAULT_MAX_BATCH_SIZE if options.max_batch_size is None else options.max_batch_size
    return _build(options, "pytorch_libtorch", "", max_batch, options.inputs, options.outputs)


def config_for_python(options: ScaffoldOptions) -> ModelConfig:
    inputs = options.inputs or (TensorArg("INPUT0", "TYPE_FP32", (-1,)),)
    outputs = options.outputs or (TensorArg("OUTPUT0", "TYPE_FP32", (-1,)),)
    max_batch = DEFAULT_MAX_BATCH_SIZE if options.max_batch_size is None else options.max_batch_size
    return _build(options, "", "python", max_batch, inputs, outputs)


def _build(
    options: ScaffoldOptions,
    platform: str,
    backend: str,
    max_batch: int,
    inputs: tuple[TensorArg, ...],
    outputs: tuple[TensorArg, ...],
) -> ModelConfig:
    from server.config.parse import model_config_pb2, new_config

    pb2 = model_config_pb2()
    config = new_config()
    config.name = options.name
    if platform:
        config.platform = platform
    if backend:
        config.backend = backend
    config.max_batch_size = max_batch
    for specs, tensors in ((inputs, config.input), (outputs, config.output)):
        for spec in specs:
            tensor = tensors.add()
            tensor.name = spec.name
            tensor.data_type = pb2.DataType.Value(spec.data_type)
            tensor.dims.extend(spec.dims if spec.dims else (1,))
    dynamic = options.dynamic_batching if options.dynamic_batching is not None else max_batch > 1
    if dynamic:
        config.dynamic_batching.SetInParent()
    group = config.instance_group.add()
    group.count = options.instance_count
    group.kind = pb2.ModelInstanceGroup.Kind.Value(options.instance_kind)
    return config


def write_model_folder(
    repository: Path, config: ModelConfig, model_file: Path | None, file_name: str, *, force: bool = False
) -> Path:
    """Write <repository>/<name>/config.pbtxt and copy the model file to <name>/1/<file_name>."""
    from server.config.write import to_pbtxt

    folder = repository / config.name
    if (folder / "config.pbtxt").exists() and not force:
        raise TritonError(
            ErrorCode.ALREADY_EXISTS,
            f"{folder / 'config.pbtxt'} already exists: pass --force to overwrite, or --name for another name",
        )
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(to_pbtxt(config), encoding="utf-8")
    target = folder / "1" / file_name
    if model_file is not None:
        shutil.copyfile(model_file, target)
    else:
        target.write_text(python_model_skeleton(config), encoding="utf-8")
    return folder


def python_model_skeleton(config: ModelConfig) -> str:
    """A model.py that loads and answers as is: each output copies the input at the same position
    (cast to the output type) or is zeros; replace the marked part with the model's logic."""
    from server.config.validate import enum_name

    inputs = [(t.name, enum_name(t, "data_type")) for t in config.input]
    outputs = [(t.name, enum_name(t, "data_type"), list(t.dims)) for t in config.output]
    lines = [
        f'"""Python model `{config.name}` for tcli and Triton (backend: "python").',
        "",
        "Scaffolded by `tcli repo scaffold --backend python`. It runs as is: each output copies the input at",
        "the same position, or is zeros. Put the model's own logic in `compute`.",
        '"""',
        "",
        "import json",
        "",
        "import numpy as np",
        "import triton_python_backend_utils as pb_utils",
        "",
        f"INPUTS = {[name for name, _ in inputs]!r}",
        f"OUTPUTS = {[name for name, _, _ in outputs]!r}",
        "",
        "",
        "class TritonPythonModel:",
        "    def initialize(self, args):",
        '        config = json.loads(args["model_config"])',
        "        self.output_dtypes = {",
        "            name: pb_utils.triton_string_to_numpy(",
        '                pb_utils.get_output_config_by_name(config, name)["data_type"]',
        "            )",
        "            for name in OUTPUTS",
        "        }",
        "        self.output_dims = {",
        '            name: pb_utils.get_output_config_by_name(config, name)["dims"] for name in OUTPUTS',
        "        }",
        '        self.batched = config.get("max_batch_size", 0) > 0',
        "",
        "    def compute(self, inputs):",
        '        """inputs: name -> numpy array; returns name -> numpy array. Replace with the model."""',
        "        outputs = {}",
        "        first = next(iter(inputs.values()), None)",
        "        for index, name in enumerate(OUTPUTS):",
        "            dtype = self.output_dtypes[name]",
        "            if index < len(INPUTS) and INPUTS[index] in inputs:",
        "                outputs[name] = inputs[INPUTS[index]].astype(dtype)",
        "            else:",
        "                dims = [max(int(d), 1) for d in self.output_dims[name]]",
        "                rows = [first.shape[0]] if self.batched and first is not None else []",
        "                outputs[name] = np.zeros(rows + dims, dtype=dtype)",
        "        return outputs",
        "",
        "    def execute(self, requests):",
        "        responses = []",
        "        for request in requests:",
        "            inputs = {",
        "                name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in INPUTS",
        "            }",
        "            outputs = self.compute(inputs)",
        "            tensors = [pb_utils.Tensor(name, outputs[name]) for name in OUTPUTS]",
        "            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))",
        "        return responses",
        "",
        "    def finalize(self):",
        "        pass",
        "",
    ]
    return "\n".join(lines)
