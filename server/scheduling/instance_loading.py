"""Loading a model version's instances: side by side where the backend allows it, as Triton's
parallel instance loading does (its python and onnxruntime backends declare it), so two instances
whose initialize takes 10 s are ready in 10 s, not 20; one after the other otherwise. Triton's
TRITON_PARALLEL_INSTANCE_LOADING switches it (registry.parallel_instances)."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

from server.backends.registry import load_instance, parallel_instances

if TYPE_CHECKING:
    from server.backends.base import InstanceSpec, ModelContext, RequestModel, TensorModel


def load_instances(context: ModelContext, specs: list[InstanceSpec]) -> list[TensorModel | RequestModel]:
    """The instances of `specs`, in their order. When one fails, those that loaded are unloaded and
    the first failure (in config order) is raised, once every load has ended."""
    if len(specs) < 2 or not parallel_instances(context):
        loaded: list[TensorModel | RequestModel] = []
        try:
            for spec in specs:
                loaded.append(load_instance(context, spec))
        except BaseException:
            _unload_each(loaded)
            raise
        return loaded
    with ThreadPoolExecutor(len(specs), thread_name_prefix=f"{context.config.name}_load") as pool:
        futures = [pool.submit(load_instance, context, spec) for spec in specs]
        wait(futures)
    failures = [error for future in futures if (error := future.exception()) is not None]
    if failures:
        _unload_each([future.result() for future in futures if future.exception() is None])
        raise failures[0]
    return [future.result() for future in futures]


def _unload_each(instances: list[TensorModel | RequestModel]) -> None:
    for instance in instances:
        with contextlib.suppress(Exception):  # a model's own cleanup failing must not stop the others
            instance.unload()
