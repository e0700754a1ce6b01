"""Where a python model's instances run: in the server process (each on its worker thread) or each in
a process of its own (`process_host`).

Threads share one GIL, so two instances of a pure-Python model take turns; processes run them in
parallel but add a pipe round trip and shared-memory copies per batch (cheap models are faster
in-thread). The rule: a model whose instance groups total 2 or more instances runs them in
processes; a single instance stays in-thread. The model config parameter TCLI_INSTANCE_PROCESS
("true" or "false") overrides it either way:

    parameters { key: "TCLI_INSTANCE_PROCESS" value { string_value: "false" } }

(Triton ignores parameters it does not know, so the config stays portable.) Models that create
custom metrics (pb_utils.MetricFamily) stay in-thread unless the parameter says "true": only the
server process exports metrics.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.backends.base import InstanceSpec, ModelContext, RequestModel

PROCESS_PARAMETER = "TCLI_INSTANCE_PROCESS"
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_LOG = logging.getLogger("tcli.python_process")


def process_override(config: ModelConfig) -> bool | None:
    """The TCLI_INSTANCE_PROCESS parameter: True, False, or None when the config does not set it."""
    if PROCESS_PARAMETER not in config.parameters:
        return None
    value = config.parameters[PROCESS_PARAMETER].string_value.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise TritonError(
        ErrorCode.INVALID_ARG,
        f'model \'{config.name}\': parameter {PROCESS_PARAMETER} must be "true" or "false", got '
        f'"{config.parameters[PROCESS_PARAMETER].string_value}"',
    )


def instance_count(config: ModelConfig) -> int:
    from server.backends.base import instance_specs

    return len(instance_specs(config))


def load(context: ModelContext, instance: InstanceSpec) -> RequestModel:
    """One instance of a python model, in-thread or in its own process as the rule above says."""
    override = process_override(context.config)
    in_process = instance_count(context.config) >= 2 if override is None else override
    if in_process and _makes_metrics(context):
        if override is None:
            _LOG.info(
                "python model '%s' instance '%s' runs in the server process: it creates custom metrics, "
                'which only the server process exports (set %s to "true" to run it in its own process)',
                context.config.name,
                instance.name,
                PROCESS_PARAMETER,
            )
            in_process = False
        else:
            _LOG.warning(
                "python model '%s' instance '%s' runs in its own process (%s): the custom metrics it "
                "creates stay there and are not exported",
                context.config.name,
                instance.name,
                PROCESS_PARAMETER,
            )
    if in_process:
        from server.backends.python.process_host import ProcessModel

        return ProcessModel(context, instance)
    from server.backends.python.host import PythonModel

    return PythonModel(context, instance)


def _makes_metrics(context: ModelContext) -> bool:
    from server.backends.python.host import read_source

    return "MetricFamily(" in read_source(context.model_file)
