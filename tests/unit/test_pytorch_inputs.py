"""The PyTorch backend takes binary inputs as they arrive (read-only numpy views on the request body)
without copying them and without torch's "array is not writable" warning. Run in a fresh interpreter:
torch gives that warning once per process, so an earlier test could hide it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.torch_needed import requires_torch

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import warnings
from pathlib import Path

import numpy as np

from server.backends.base import InstanceSpec, ModelContext
from server.backends.pytorch import TorchScriptModel
from server.config.complete import complete_config
from server.config.parse import read_config
from server.config.model_folder import scan_model

repository = Path("model_repository")
folder = scan_model(repository / "digits_torchscript", repository)
config = complete_config(read_config(folder.config_path)[0], folder)
model = TorchScriptModel(ModelContext(config, folder.path, 1, repository), InstanceSpec("m_0", "KIND_CPU"))
body = np.arange(2 * 64, dtype=np.float32).tobytes()
images = np.frombuffer(body, dtype=np.float32).reshape(2, 1, 8, 8)
assert not images.flags.writeable
warnings.simplefilter("error")  # any warning from here on fails the run
out = model.execute({"INPUT__0": images}, ["OUTPUT__0"])
assert out["OUTPUT__0"].shape == (2, 10)
print("ok")
"""


@requires_torch
def test_read_only_inputs_give_no_warning() -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
