"""deploy/docker/: the CPU and GPU images, read instruction by instruction (no container engine runs
here), and the CPU image's entrypoint command line run on this machine until its HEALTHCHECK passes."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.deploy.deploy_helpers import BIN, DEPLOY, ROOT, Served, add_sub_repository, free_port

CPU = DEPLOY / "docker" / "Dockerfile"
GPU = DEPLOY / "docker" / "Dockerfile.gpu"
READY = "http://localhost:8000/v2/health/ready"


@dataclass
class Instruction:
    name: str  # upper case: FROM, RUN, ...
    value: str  # the rest of the (joined) line

    def exec_form(self) -> list[str]:
        """The JSON array of ENTRYPOINT/CMD (the form Docker runs without a shell)."""
        words = json.loads(self.value)
        assert isinstance(words, list), self.value
        return [str(word) for word in words]


def read_dockerfile(path: Path) -> list[Instruction]:
    """Instructions in order: comments dropped, backslash continuations joined."""
    instructions, pending = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        name, _, value = (pending + line).partition(" ")
        instructions.append(Instruction(name.upper(), " ".join(value.split())))
        pending = ""
    assert not pending, f"{path}: a continuation runs off the end"
    return instructions


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    """The instructions of each stage, its FROM first."""
    found: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction.name == "FROM":
            found.append([])
        if found:
            found[-1].append(instruction)
    return found


def last(stage: list[Instruction], name: str) -> Instruction:
    matching = [i for i in stage if i.name == name]
    assert matching, f"no {name} in the final stage"
    return matching[-1]


@pytest.fixture(params=[CPU, GPU], ids=["cpu", "gpu"])
def final_stage(request: pytest.FixtureRequest) -> list[Instruction]:
    return stages(read_dockerfile(request.param))[-1]


def test_both_images_build_in_stages_and_ship_only_the_environment() -> None:
    for path in (CPU, GPU):
        built = stages(read_dockerfile(path))
        assert len(built) >= 2, f"{path.name} is not multi-stage"
        assert re.search(r"\bAS build\b", built[0][0].value), built[0][0].value
        copies = [i.value for i in built[-1] if i.name == "COPY"]
        assert copies == ["--from=build /opt/venv /opt/venv"], copies  # no build context in the image
    assert "python:3.11-slim" in CPU.read_text()
    assert re.search(r"nvidia/cuda:[\w.-]+-runtime", GPU.read_text())


def test_runs_as_numeric_uid_1000(final_stage: list[Instruction]) -> None:
    # numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd
    assert last(final_stage, "USER").value == "1000"


def test_exposes_tritons_three_ports(final_stage: list[Instruction]) -> None:
    exposed = {port for i in final_stage if i.name == "EXPOSE" for port in i.value.split()}
    assert exposed == {"8000", "8001", "8002"}


def test_healthcheck_asks_readiness(final_stage: list[Instruction]) -> None:
    check = last(final_stage, "HEALTHCHECK").value
    assert " CMD " in f" {check} " and READY in check


def test_entrypoint_is_tcli_serve_with_the_models_folder(final_stage: list[Instruction]) -> None:
    assert last(final_stage, "ENTRYPOINT").exec_form() == ["tcli", "serve"]
    assert last(final_stage, "CMD").exec_form() == ["--model-repository=/models"]


def test_tritonserver_is_on_the_path(final_stage: list[Instruction]) -> None:
    # the environment's bin folder holds the package's console scripts, tritonserver among them
    env = " ".join(i.value for i in final_stage if i.name == "ENV")
    assert re.search(r"\bPATH=/opt/venv/bin:\$PATH\b", env), env
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tritonserver"] == "tcli.tritonserver:run"


def _pip_installs(path: Path) -> list[str]:
    return [
        i.value for i in read_dockerfile(path) if i.name == "RUN" and re.search(r"\bpip install\b", i.value)
    ]


def _requirements(command: str) -> list[str]:
    """The requirement words of a `pip install` command (options and their values left out)."""
    words = shlex.split(command)
    words = words[words.index("install") + 1 :]
    taking_value = {"--index-url", "--extra-index-url", "-i", "-r", "-c", "-f", "--find-links"}
    found, skip = [], False
    for word in words:
        if skip or word in ("&&", ";"):
            skip = False
            if word in ("&&", ";"):
                break
            continue
        if word.startswith("-"):
            skip = word in taking_value
            continue
        found.append(word)
    return found


def test_cpu_image_takes_torch_from_the_cpu_index_before_the_package() -> None:
    installs = _pip_installs(CPU)
    torch = [
        n for n, c in enumerate(installs) if any(re.match(r"torch\b(?!\[)", r) for r in _requirements(c))
    ]
    assert torch, installs
    for n in torch:  # never a plain `pip install torch` (the multi-GB CUDA build)
        assert "--index-url https://download.pytorch.org/whl/cpu" in installs[n], installs[n]
    package = next(n for n, c in enumerate(installs) if any(r.startswith(".[") for r in _requirements(c)))
    assert max(torch) < package, "torch's CPU wheel must be installed before the package (its torch extra)"


def test_gpu_image_installs_the_gpu_extra() -> None:
    installs = " ".join(_pip_installs(GPU))
    assert re.search(r"\.\[[^]]*\bgpu\b", installs), installs  # onnxruntime-gpu and tensorrt


def test_build_context_builds_the_package_with_both_console_scripts(tmp_path: Path) -> None:
    """The files the build stage copies are enough to build tcli, and .dockerignore keeps them."""
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    context = tmp_path / "context"
    for copy in (i for i in stages(read_dockerfile(CPU))[0] if i.name == "COPY"):
        *sources, _ = copy.value.split()
        for source in sources:
            assert source not in ignored, f".dockerignore drops {source}, which the build copies"
            origin = ROOT / source
            if origin.is_dir():
                shutil.copytree(origin, context / source, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                (context / source).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(origin, context / source)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", "dist", "."],
        cwd=context,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (context / "dist").glob("tcli-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "tritonserver = tcli.tritonserver:run" in entry_points
    assert "server/app.py" in names and "tcli/main.py" in names


def test_entrypoint_command_serves_add_sub_until_the_healthcheck_passes(tmp_path: Path) -> None:
    final = stages(read_dockerfile(CPU))[-1]
    repository = add_sub_repository(tmp_path)
    program, *arguments = last(final, "ENTRYPOINT").exec_form() + last(final, "CMD").exec_form()
    arguments = [a.replace("=/models", f"={repository}") for a in arguments]
    http, grpc, metrics = free_port(), free_port(), free_port()
    ports = ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    argv = [str(BIN / program), *arguments, *ports]
    with Served(argv, http) as server:
        server.wait_ok("/v2/health/ready")
        # the HEALTHCHECK's own command, pointed at this port, exits 0
        check = last(final, "HEALTHCHECK").value
        command = json.loads(check[check.index(" CMD ") + 5 :])
        command = [c.replace("localhost:8000", f"127.0.0.1:{http}") for c in command]
        command[0] = sys.executable if command[0] == "python" else command[0]
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr


def test_tritons_chart_args_work_after_the_entrypoint(tmp_path: Path) -> None:
    repository = add_sub_repository(tmp_path)
    http = free_port()
    # Triton's AWS/GCP charts put `tritonserver` first in `args:`, which the image's ENTRYPOINT receives
    chart_args = ["tritonserver", f"--model-store={repository}", "--model-control-mode=poll"]
    ports = ["--http-port", str(http), "--grpc-port", str(free_port()), "--metrics-port", str(free_port())]
    with Served([str(BIN / "tcli"), "serve", *chart_args, *ports], http) as server:
        server.wait_ok("/v2/health/ready", timeout=60)


def test_shell_form_is_not_used_for_the_entrypoint() -> None:
    # exec form: the server is PID 1 and gets SIGTERM itself, so it drains instead of being killed
    for path in (CPU, GPU):
        final = stages(read_dockerfile(path))[-1]
        for name in ("ENTRYPOINT", "CMD"):
            assert last(final, name).value.startswith("["), shlex.quote(last(final, name).value)
