"""The contracts between the layers hold. Every backend of the backend table offers the module
interface the table declares, and loads instances of classes that implement the instance contract of server/backends/base.py (nothing abstract left, every method of the
contract with the contract's parameters); every scheduler the runner can make implements
work.Scheduler; the scheduling layer learns what an instance or a scheduler can do only from those
declarations, never by probing with getattr/hasattr; and BLS asks the runner, never its private
attributes. mypy checks the types of the same contracts where each class is created."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from server.backends import table
from server.backends.base import LoopRequestModel, ModelInstance, RequestModel, TensorModel
from server.backends.registry import instance_classes
from server.scheduling.dynamic_batcher import DynamicBatcher
from server.scheduling.sequence import SequenceScheduler
from server.scheduling.work import DefaultScheduler, Scheduler

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = (LoopRequestModel, RequestModel, TensorModel, ModelInstance)


def parameters(function: object) -> list[str]:
    return list(inspect.signature(function).parameters)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", table.NAMES)
def test_each_backend_module_offers_the_table_interface(backend: str) -> None:
    entry = table.built_in(backend)
    assert entry is not None and entry.name == backend
    module = entry.module()
    for name in ("load", "instance_classes"):
        declared = getattr(table.BackendModule, name)
        assert parameters(getattr(module, name)) == parameters(declared)[1:], f"{module.__name__}.{name}"
    assert module.instance_classes(), f"{module.__name__} loads no class"
    # optional capabilities are declared by every module, as a function or as None
    completer, check = vars(module)["complete_config"], vars(module)["check_model_file"]
    if completer is not None:
        assert parameters(completer)[:4] == ["config", "model_file", "model_dir", "backend_config"]
    if check is not None:
        assert parameters(check) == ["config", "model_file", "found"]


def test_the_backend_table_names_each_backend_platform_and_file_once() -> None:
    platforms = [platform.name for entry in table.BUILT_IN for platform in entry.platforms]
    files = [entry.model_file for entry in table.BUILT_IN]
    assert len(set(table.NAMES)) == len(table.NAMES)
    assert len(set(platforms)) == len(platforms)
    assert len(set(files)) == len(files)  # a version folder's file tells its backend (config/backends.py)


def test_reading_the_table_and_its_modules_imports_no_framework() -> None:
    """Each backend's module is imported when a model names it; the framework only when an instance
    loads."""
    code = (
        "import sys\n"
        "from server.backends import table\n"
        "for entry in table.BUILT_IN:\n"
        "    entry.module().instance_classes()\n"
        "print(sorted(m for m in ('onnxruntime', 'torch', 'tensorrt') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("backend", table.NAMES)
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
