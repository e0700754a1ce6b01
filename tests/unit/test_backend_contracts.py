"""The contracts between the layers hold. Every backend tcli serves loads instances of classes that
implement the instance contract of server/backends/base.py (nothing abstract left, every method of the
contract with the contract's parameters); every scheduler the runner can make implements
work.Scheduler; the scheduling layer learns what an instance or a scheduler can do only from those
declarations, never by probing with getattr/hasattr; and BLS asks the runner, never its private
attributes. mypy checks the types of the same contracts where each class is created."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from server.backends.base import LoopRequestModel, ModelInstance, RequestModel, TensorModel
from server.backends.registry import BACKENDS, instance_classes
from server.config.backends import SERVED_BACKENDS
from server.scheduling.dynamic_batcher import DynamicBatcher
from server.scheduling.sequence import SequenceScheduler
from server.scheduling.work import DefaultScheduler, Scheduler

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = (LoopRequestModel, RequestModel, TensorModel, ModelInstance)


def parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


def test_the_backend_table_is_the_served_backends() -> None:
    assert set(BACKENDS) == SERVED_BACKENDS


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_implements_the_instance_contract(backend: str) -> None:
    for cls in instance_classes(backend):
        contract = next(c for c in CONTRACTS if issubclass(cls, c))
        assert contract in (TensorModel, RequestModel, LoopRequestModel), f"{cls.__name__} has no shape"
        assert not inspect.isabstract(cls), f"{cls.__name__} misses {sorted(cls.__abstractmethods__)}"
        declarations = [vars(c).items() for c in contract.__mro__ if c in CONTRACTS]
        for name, declared in [item for items in declarations for item in items]:
            if callable(declared) and not name.startswith("_"):
                assert parameters(getattr(cls, name)) == parameters(declared), f"{cls.__name__}.{name}"


def test_python_instances_in_processes_take_batches_from_the_event_loop() -> None:
    thread_class, process_class = instance_classes("python")
    assert not issubclass(thread_class, LoopRequestModel)
    assert issubclass(process_class, LoopRequestModel)


@pytest.mark.parametrize("scheduler", [DefaultScheduler, DynamicBatcher, SequenceScheduler])
def test_each_scheduler_implements_the_scheduler_contract(scheduler: type[Scheduler]) -> None:
    assert issubclass(scheduler, Scheduler) and not inspect.isabstract(scheduler)
    assert isinstance(scheduler.pads_batches, bool)
    assert parameters(scheduler.prepare) == parameters(Scheduler.prepare)


def calls(path: Path, names: set[str]) -> list[str]:
    tree = ast.parse(path.read_text())
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names
    ]


def test_scheduling_probes_no_capability() -> None:
    probes = [
        found
        for path in sorted((ROOT / "server" / "scheduling").rglob("*.py"))
        for found in calls(path, {"getattr", "hasattr"})
    ]
    assert probes == []


def test_bls_reads_no_private_attribute_of_another_object() -> None:
    path = ROOT / "server" / "bls.py"
    private = [
        f"bls.py:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"})
    ]
    assert private == []
