"""Where a python model's instances run: each in a process of its own (`process_host`, the default,
as Triton runs each instance in a stub process), or in the server process on its worker thread.

A process keeps the model's crash (a segfault, `os._exit`, the OOM killer) to that model: the server
and every other model go on, the model's running requests fail, and an instance that keeps dying
leaves its version UNAVAILABLE. Processes also run instances in parallel (threads share one GIL).
In the server process a cheap model answers faster (no pipe round trip, no shared-memory copies);
a model or a whole server opts in to that:

    parameters { key: "TCLI_INSTANCE_PROCESS" value { string_value: "false" } }   (one model)
    tcli serve --backend-config=python,instance-process=false                     (every python model)

The model's parameter wins over the server's setting. (Triton ignores parameters it does not know,
so the config stays portable.) A model with an execution environment (EXECUTION_ENV_PATH,
`execution_env`) runs in processes whatever the server says: its python is another interpreter.
The python backend's other --backend-config settings are `backend_settings`. A model's custom metrics (pb_utils.MetricFamily) are exported
wherever it runs: an instance process forwards them to the server (`metric_forwarding`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from server.backends.python import execution_env
from server.backends.python.backend_settings import python_settings
from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.backends.base import InstanceSpec, ModelContext, RequestModel

PROCESS_PARAMETER = "TCLI_INSTANCE_PROCESS"
PROCESS_SETTING = "instance-process"  # --backend-config=python,instance-process=true|false
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def process_override(config: ModelConfig) -> bool | None:
    """The TCLI_INSTANCE_PROCESS parameter: True, False, or None when the config does not set it."""
    if PROCESS_PARAMETER not in config.parameters:
        return None
    return _boolean(
        config.parameters[PROCESS_PARAMETER].string_value,
        f"model '{config.name}': parameter {PROCESS_PARAMETER}",
    )


def process_setting(backend_config: Mapping[str, str]) -> bool | None:
    """The server's --backend-config=python,instance-process=... (None when it is not given)."""
    if PROCESS_SETTING not in backend_config:
        return None
    return _boolean(backend_config[PROCESS_SETTING], f"--backend-config=python,{PROCESS_SETTING}")


def _boolean(value: str, what: str) -> bool:
    text = value.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise TritonError(ErrorCode.INVALID_ARG, f'{what} must be "true" or "false", got "{value}"')


def own_process(context: ModelContext) -> bool:
    """Whether the model's instances run in processes of their own, as the rule above says."""
    override = process_override(context.config)
    setting = process_setting(context.backend_config)
    if execution_env.configured_path(context.config, context.model_dir) is not None:
        if override is False:
            raise TritonError(
                ErrorCode.INVALID_ARG,
                f"model '{context.config.name}' sets {execution_env.PARAMETER} and {PROCESS_PARAMETER} "
                f'"false": an execution environment runs in processes of its own; remove one of them',
            )
        setting = True
    return next((choice for choice in (override, setting) if choice is not None), True)


def load(context: ModelContext, instance: InstanceSpec) -> RequestModel:
    """One instance of a python model, in-thread or in its own process as the rule above says."""
    python_settings(context.backend_config)  # refuses what Triton refuses; logs what tcli ignores
    if own_process(context):
        from server.backends.python.process_host import ProcessModel

        return ProcessModel(context, instance)
    from server.backends.python.host import PythonModel

    return PythonModel(context, instance)
