"""Does the model file agree with its config? Each built-in backend checks its own file, without
loading it for serving (the backend table, server/backends/table.py, names the check): the
onnxruntime backend ONNX names, data types and ranks, the pytorch backend forward()'s arity."""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.backends import table

if TYPE_CHECKING:
    from pathlib import Path

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.config.validate import Findings


def check_model_file(config: ModelConfig, model_file: Path, found: Findings) -> None:
    entry = table.built_in(config.backend)
    check = entry.module().check_model_file if entry is not None else None
    if check is not None:
        check(config, model_file, found)
