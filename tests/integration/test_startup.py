"""Start-up pays only for what the repository needs: a framework is imported when a model of it loads
(torch alone costs more than a second), and the command line imports no framework at all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import link_repository, python_host_available

FRAMEWORKS = ("torch", "onnxruntime")

# serve a repository in-process as `tcli serve` composes the server, then list the frameworks imported
SERVE_AND_LIST = """
import sys
from pathlib import Path
from server.app import Server, ServerSettings
settings = ServerSettings([Path(sys.argv[1])], host="127.0.0.1", http_port=0, grpc_port=0, metrics_port=0)
server = Server(settings).start()
assert server.service.ready()
print("imported:" + ",".join(m for m in sys.argv[2:] if m in sys.modules))
server.stop()
"""


def frameworks_imported(repository: Path) -> list[str]:
    ran = subprocess.run(
        [sys.executable, "-c", SERVE_AND_LIST, str(repository), *FRAMEWORKS],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    (line,) = [line for line in ran.stdout.splitlines() if line.startswith("imported:")]
    return [m for m in line.removeprefix("imported:").split(",") if m]


@pytest.mark.parametrize(
    ("models", "expected"),
    [
        (["simple"], ["onnxruntime"]),
        (["digits_torchscript"], ["torch"]),
        pytest.param(
            ["add_sub"],
            [],
            marks=pytest.mark.skipif(not python_host_available(), reason="needs the python backend host"),
        ),
    ],
)
def test_serving_imports_only_the_frameworks_its_models_use(
    models: list[str], expected: list[str], tmp_path: Path
) -> None:
    if "torch" in expected:
        pytest.importorskip("torch")
    assert frameworks_imported(link_repository(tmp_path / "models", models)) == expected
