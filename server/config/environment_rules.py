"""The rule on a python model's execution environment (EXECUTION_ENV_PATH): what `tcli repo validate`
can tell without running the environment's python (the load runs it, `server.backends.python.execution_env`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.backends.python import execution_env
from server.config import backends

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.config.model_folder import ModelFolder
    from server.config.validate import Findings

# backends that never read the parameter (a Python-based backend's models do: they run on the python backend)
_OTHER_BACKENDS = frozenset(
    {info.backend for info in backends.PLATFORMS.values() if info.backend} | {"openvino"}
)


def check_execution_env(config: ModelConfig, folder: ModelFolder, found: Findings) -> None:
    """EXECUTION_ENV_PATH (a python model's execution environment) names an archive, or a folder with
    bin/python. Whether its python can run the model is found when it loads (that runs it)."""
    if config.platform or config.backend in _OTHER_BACKENDS:  # only the python backend reads it
        return
    path = execution_env.configured_path(config, folder.path)
    if path is None:
        return
    at = ("parameters", execution_env.PARAMETER)
    problem = execution_env.problem(path)
    if problem is not None:
        found.error(
            f"model '{config.name or folder.name}': {problem}",
            "point it at a conda-pack or venv-pack .tar.gz, or at the folder such an archive unpacks to; "
            "$$TRITON_MODEL_DIRECTORY stands for the model's folder",
            at,
        )
    elif path.is_dir() and not (path / "bin" / "activate").exists():
        found.warning(
            f"model '{config.name or folder.name}': {execution_env.PARAMETER} '{path}' has no bin/activate; "
            "tcli runs its bin/python, but Triton refuses an environment without an activation script",
            "unpack the environment from its conda-pack or venv-pack archive, which includes bin/activate",
            at,
        )
