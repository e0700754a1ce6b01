"""The python backend as the backend table (server/backends/table.py) sees it: loading an instance
(placement.py chooses where it runs), the classes it loads, and completing a config with the model's
own `auto_complete_config` (autocomplete.py), run under the model's execution environment when it
has one. A Python-based backend's model.py is completed the same way (`python_based`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.backends.base import InstanceSpec, ModelContext, ModelInstance, RequestModel


def load(context: ModelContext, instance: InstanceSpec) -> RequestModel:
    from server.backends.python import placement

    return placement.load(context, instance)


def instance_classes() -> tuple[type[ModelInstance], ...]:
    from server.backends.python.host import PythonModel
    from server.backends.python.process_host import ProcessModel

    return (PythonModel, ProcessModel)


def complete_config(
    config: ModelConfig,
    model_file: Path,
    model_dir: Path,
    backend_config: Mapping[str, Mapping[str, str]],
    *,
    python_based: bool = False,
) -> None:
    """The config as the model's `auto_complete_config` completes it (unchanged when its class has none)."""
    from server.backends.python import execution_env
    from server.backends.python.autocomplete import complete_by_model
    from server.protocol.config_json import from_json_dict, to_json_dict

    name = config.name or model_file.parent.parent.name
    env_path = execution_env.configured_path(config, model_dir)  # EXECUTION_ENV_PATH: the model's python
    if env_path is not None and execution_env.problem(env_path) is not None:
        return  # its load (and repo validate) says what is wrong with the environment
    environment = execution_env.prepare(config, model_dir)
    if environment is not None:
        completed = execution_env.auto_complete(
            environment, model_file, name, to_json_dict(config), python_based
        )
    else:
        completed = complete_by_model(
            model_file, name, lambda: to_json_dict(config), python_based=python_based
        )
    if completed is not None:  # None: the model's class completes nothing, the config stays as it is
        config.CopyFrom(from_json_dict(completed))


check_model_file = None  # nothing to read in model.py without running its code
