"""Scaffold a language model from a local Hugging Face model folder (config.json, *.safetensors or
*.bin weights, tokenizer files): a decoupled python model in Triton's LLM conventions
(server/config/hf_llm_model.py is its model.py) with the batch size and instance count chosen for
this machine's cores and memory.

Nothing here imports transformers or torch: the folder is read as JSON and file sizes.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from server.config.scaffold import ScaffoldOptions, TensorArg
from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

WEIGHTS_FOLDER = "hf"  # in the version folder, when the weights are copied
WEIGHT_SUFFIXES = (".safetensors", ".bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
# the share of available memory the key/value caches of one instance may take
KV_CACHE_SHARE = 0.25
MAX_BATCH_CEILING = 8  # on CPU, larger batches add latency for little throughput
# requests arriving this close together start as one batch (one forward pass per token for all):
# a batch's requests generate together to the end, and one that comes later generates beside them,
# in turns, so that clients starting together a few ms apart should still meet in one batch
BATCH_WINDOW_US = 5000
CORES_PER_INSTANCE = 4  # torch's threads scale well up to about this many per forward pass

INPUTS = (
    TensorArg("text_input", "TYPE_STRING", (1,)),
    TensorArg("stream", "TYPE_BOOL", (1,)),
    TensorArg("sampling_parameters", "TYPE_STRING", (1,)),
    TensorArg("exclude_input_in_output", "TYPE_BOOL", (1,)),
    TensorArg("max_tokens", "TYPE_INT32", (1,)),
    TensorArg("temperature", "TYPE_FP32", (1,)),
    TensorArg("top_p", "TYPE_FP32", (1,)),
    TensorArg("top_k", "TYPE_INT32", (1,)),
    TensorArg("seed", "TYPE_UINT64", (1,)),
    TensorArg("stop_words", "TYPE_STRING", (-1,)),
    TensorArg("return_num_input_tokens", "TYPE_BOOL", (1,)),
    TensorArg("return_num_output_tokens", "TYPE_BOOL", (1,)),
    TensorArg("return_finish_reason", "TYPE_BOOL", (1,)),
)
OUTPUTS = (
    TensorArg("text_output", "TYPE_STRING", (-1,)),
    TensorArg("num_input_tokens", "TYPE_UINT32", (1,)),
    TensorArg("num_output_tokens", "TYPE_UINT32", (1,)),
    TensorArg("finish_reason", "TYPE_STRING", (1,)),
)


@dataclass(frozen=True)
class LlmSizing:
    """What was chosen for this machine, and from what (printed by the scaffold)."""

    max_batch_size: int
    instance_count: int
    cpu_threads: int
    cores: int
    available_bytes: int
    weights_bytes: int

    def describe(self) -> str:
        return (
            f"max_batch_size {self.max_batch_size}, {self.instance_count} instance(s) of "
            f"{self.cpu_threads} thread(s), for {self.cores} core(s) and "
            f"{self.available_bytes / 1e9:.1f} GB available ({self.weights_bytes / 1e6:.1f} MB of weights)"
        )


def is_huggingface_folder(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def read_folder(folder: Path) -> tuple[dict[str, object], int]:
    """config.json and the weights' total size; an error naming what is missing."""
    try:
        hf_config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TritonError(ErrorCode.INVALID_ARG, f"{folder / 'config.json'} cannot be read: {exc}") from None
    if not isinstance(hf_config, dict):
        raise TritonError(ErrorCode.INVALID_ARG, f"{folder / 'config.json'} is not a JSON object")
    weights = [p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file()]
    if not weights:
        raise TritonError(
            ErrorCode.INVALID_ARG, f"{folder} has no weights (*.safetensors or *.bin): not a model folder"
        )
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise TritonError(
            ErrorCode.INVALID_ARG,
            f"{folder} has no tokenizer ({', '.join(TOKENIZER_FILES)}): save the tokenizer beside the model",
        )
    return hf_config, sum(p.stat().st_size for p in weights)


def size_for_machine(
    hf_config: dict[str, object], weights_bytes: int, cores: int | None = None, available: int | None = None
) -> LlmSizing:
    """Instances: one per CORES_PER_INSTANCE cores, as many as memory holds copies of the weights;
    batch: as many sequences at full context as a share of memory holds key/value caches for."""
    import psutil

    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    available = available or int(psutil.virtual_memory().available)
    by_memory = max(1, int(available * 0.5) // max(weights_bytes, 1))
    instances = max(1, min(cores // CORES_PER_INSTANCE, by_memory))
    text_config = hf_config.get("text_config")
    source = text_config if isinstance(text_config, dict) else hf_config
    layers = _int(source, "num_hidden_layers", "n_layer", default=12)
    hidden = _int(source, "hidden_size", "n_embd", default=768)
    heads = _int(source, "num_attention_heads", "n_head", default=12)
    kv_heads = _int(source, "num_key_value_heads", default=heads)
    head_dim = _int(source, "head_dim", default=hidden // max(heads, 1))
    context = min(_int(source, "max_position_embeddings", "n_positions", default=2048), 4096)
    per_sequence = 2 * layers * kv_heads * head_dim * 4 * context  # keys and values, float32
    budget = int(available * KV_CACHE_SHARE) // instances
    batch = max(1, min(MAX_BATCH_CEILING, budget // max(per_sequence, 1)))
    return LlmSizing(batch, instances, max(1, cores // instances), cores, available, weights_bytes)


def _int(source: dict[str, object], *keys: str, default: int) -> int:
    for key in keys:
        value = source.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return default


def config_for_llm(options: ScaffoldOptions, sizing: LlmSizing, weights: str, tokenizer: str) -> ModelConfig:
    """The config: decoupled, dynamic batching, optional inputs beside text_input, and the
    parameters model.py (weights, threads) and the OpenAI front end (tokenizer) read."""
    from server.config.parse import model_config_pb2, new_config

    pb2 = model_config_pb2()
    config = new_config()
    config.name = options.name
    config.backend = "python"
    max_batch = sizing.max_batch_size if options.max_batch_size is None else options.max_batch_size
    config.max_batch_size = max_batch
    config.model_transaction_policy.decoupled = True
    for specs, tensors in ((INPUTS, config.input), (OUTPUTS, config.output)):
        for spec in specs:
            tensor = tensors.add()
            tensor.name = spec.name
            tensor.data_type = pb2.DataType.Value(spec.data_type)
            tensor.dims.extend(spec.dims)
            if tensors is config.input and spec.name != "text_input":
                tensor.optional = True
    dynamic = options.dynamic_batching if options.dynamic_batching is not None else max_batch > 1
    if dynamic:
        config.dynamic_batching.max_queue_delay_microseconds = BATCH_WINDOW_US
    group = config.instance_group.add()
    group.count = options.instance_count or sizing.instance_count  # 0: the machine's choice
    group.kind = pb2.ModelInstanceGroup.Kind.Value(options.instance_kind)
    for key, value in (
        ("huggingface_model", weights),
        ("tokenizer", tokenizer),
        ("cpu_threads", str(sizing.cpu_threads)),
    ):
        config.parameters[key].string_value = value
    return config


def write_llm_folder(
    repository: Path, folder: Path, options: ScaffoldOptions, *, copy: bool = True, force: bool = False
) -> tuple[Path, LlmSizing]:
    """<repository>/<name>/config.pbtxt and 1/model.py; the Hugging Face folder copied to 1/hf
    (or, with copy False, named by its absolute path)."""
    from server.config.write import to_pbtxt

    hf_config, weights_bytes = read_folder(folder)
    sizing = size_for_machine(hf_config, weights_bytes)
    target = repository / options.name
    if (target / "config.pbtxt").exists() and not force:
        raise TritonError(
            ErrorCode.ALREADY_EXISTS,
            f"{target / 'config.pbtxt'} already exists: pass --force to overwrite, or --name for another name",
        )
    version = target / "1"
    if copy:
        weights, tokenizer = WEIGHTS_FOLDER, f"1/{WEIGHTS_FOLDER}"
    else:
        weights = tokenizer = str(folder.resolve())
    config = config_for_llm(options, sizing, weights, tokenizer)
    version.mkdir(parents=True, exist_ok=True)
    if copy:
        shutil.copytree(folder, version / WEIGHTS_FOLDER, dirs_exist_ok=True)
    (target / "config.pbtxt").write_text(to_pbtxt(config), encoding="utf-8")
    (version / "model.py").write_text(model_source(options.name), encoding="utf-8")
    return target, sizing


def model_source(name: str) -> str:
    source = (Path(__file__).with_name("hf_llm_model.py")).read_text(encoding="utf-8")
    return source.replace("`{name}`", f"`{name}`", 1)
