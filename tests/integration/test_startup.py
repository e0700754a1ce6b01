"""Start-up pays only for what the repository needs: a framework is imported when a model of it loads
(torch alone costs more than a second), torch comes without CUDA bindings no GPU can use, and the
metrics library waits for the first scrape."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import link_repository
from tests.torch_needed import import_torch

FRAMEWORKS = ("torch", "onnxruntime")

# serve a repository in-process as `tcli serve` composes the server, then list the frameworks imported
# then scrape /metrics once and list them again ("scraped:")
SERVE_AND_LIST = """
import sys, urllib.request
from pathlib import Path
from server.app import Server, ServerSettings
settings = ServerSettings([Path(sys.argv[1])], host="127.0.0.1", http_port=0, grpc_port=0, metrics_port=0)
server = Server(settings).start()
assert server.service.ready()
print("imported:" + ",".join(m for m in sys.argv[2:] if m in sys.modules))
with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics") as response:
    print("families:" + ",".join(l.split()[2] for l in response.read().decode().splitlines() if l.startswith("# TYPE")))
print("scraped:" + ",".join(m for m in sys.argv[2:] if m in sys.modules))
server.stop()
"""


def serve_and_list(repository: Path, modules: tuple[str, ...]) -> dict[str, list[str]]:
    """Which of `modules` the server process has imported once ready ("imported") and after one
    scrape of /metrics ("scraped"), and the metric families that scrape returned ("families")."""
    ran = subprocess.run(
        [sys.executable, "-c", SERVE_AND_LIST, str(repository), *modules],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    found = {}
    for line in ran.stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep and key in ("imported", "scraped", "families"):
            found[key] = [m for m in value.split(",") if m]
    return found


def frameworks_imported(repository: Path) -> list[str]:
    return serve_and_list(repository, FRAMEWORKS)["imported"]


@pytest.mark.parametrize(
    ("models", "expected"),
    [
        (["simple"], ["onnxruntime"]),
        (["digits_torchscript"], ["torch"]),
        pytest.param(
            ["add_sub"],
            [],
        ),
    ],
)
def test_serving_imports_only_the_frameworks_its_models_use(
    models: list[str], expected: list[str], tmp_path: Path
) -> None:
    if "torch" in expected:
        import_torch()
    assert frameworks_imported(link_repository(tmp_path / "models", models)) == expected


def test_the_metrics_library_is_imported_at_the_first_scrape(tmp_path: Path) -> None:
    listed = serve_and_list(link_repository(tmp_path / "models", ["simple"]), ("prometheus_client",))
    assert listed["imported"] == []
    assert listed["scraped"] == ["prometheus_client"]
    assert "nv_inference_request_success" in listed["families"]
    assert "nv_cpu_utilization" in listed["families"]


@pytest.mark.skipif(importlib.util.find_spec("cuda") is None, reason="cuda-python is not installed")
def test_torch_models_load_without_cuda_bindings_when_no_gpu_is_visible(tmp_path: Path) -> None:
    import_torch()
    from server.backends.devices import visible_gpu_count

    if visible_gpu_count():
        pytest.skip("a GPU is visible: torch keeps its CUDA bindings")
    listed = serve_and_list(
        link_repository(tmp_path / "models", ["digits_torchscript"]), ("torch", "cuda.bindings")
    )
    assert listed["imported"] == ["torch"]


def test_cuda_bindings_are_refused_to_torch_alone() -> None:
    """During torch's import the bindings are refused to torch's own modules, to nobody else."""
    if importlib.util.find_spec("cuda") is None or importlib.util.find_spec("cuda.bindings") is None:
        pytest.skip("cuda-python is not installed")
    code = (
        "import sys\n"
        "from server.backends.pytorch_import import SkipCudaBindingsForTorch\n"
        "sys.meta_path.insert(0, SkipCudaBindingsForTorch())\n"
        "try:\n"
        "    exec('import cuda.bindings', {'__name__': 'torch.cuda._utils'})\n"
        "except ModuleNotFoundError:\n"
        "    print('torch: refused')\n"
        "import cuda.bindings\n"
        "print('others: imported')\n"
    )
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split("\n")[:2] == ["torch: refused", "others: imported"]
