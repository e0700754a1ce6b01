"""Unloading a model returns its memory: a python model holding 300 MB is loaded and unloaded and the
server process's resident memory goes back down."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import psutil

from server.repository.manager import ControlMode, ModelManager

BIG_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.weights = np.ones(300 * 2**20 // 8)  # 300 MB, touched, so it is resident

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]) for r in requests]
"""

CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def resident_mb() -> float:
    gc.collect()
    return psutil.Process().memory_info().rss / 2**20


def test_unload_returns_the_models_memory(tmp_path: Path) -> None:
    (tmp_path / "big" / "1").mkdir(parents=True)
    (tmp_path / "big" / "config.pbtxt").write_text(CONFIG)
    (tmp_path / "big" / "1" / "model.py").write_text(BIG_MODEL)
    manager = ModelManager([tmp_path], ControlMode.EXPLICIT)
    try:
        before = resident_mb()
        manager.load("big")
        loaded = resident_mb()
        assert loaded - before > 250, (before, loaded)
        manager.unload("big")
        deadline = time.monotonic() + 30  # the old runners drain and unload on a background thread
        after = resident_mb()
        while after - before > 50 and time.monotonic() < deadline:
            time.sleep(0.1)
            after = resident_mb()
        assert after - before < 50, (before, loaded, after)
    finally:
        manager.shutdown()
