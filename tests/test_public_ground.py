"""tcli stands on what its dependencies publish: no private module, no private attribute, and no
module a dependency does not document.

A private name (one starting with `_`) or an undocumented module of a dependency can change in any
release without notice, and a fresh install picks the newest release the bounds in pyproject.toml
allow. So every third-party module imported anywhere in server/ and tcli/ is listed below with the
page that documents it; an import that is not listed fails here until someone finds where the
dependency documents it (or stops using it). The standard library is held to the same rule for
names: `asyncio`'s private attributes are as unstable as anyone's.

Private attributes are found by name, read with `ast` (nothing is imported): `obj._name` is allowed
only when tcli itself defines `_name` somewhere (its own classes may share their internals), or it is
one of the few underscore names a library documents as public (`os._exit`, `sys._getframe`,
namedtuple's `_replace`).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("server", "tcli")

# every third-party module tcli imports, with where its publisher documents it
DOCUMENTED: dict[str, str] = {
    "PIL": "https://pillow.readthedocs.io/en/stable/reference/Image.html",
    "azure.storage.blob": "https://learn.microsoft.com/python/api/azure-storage-blob/",
    "boto3": "https://boto3.amazonaws.com/v1/documentation/api/latest/index.html",
    "botocore.config": "https://botocore.amazonaws.com/v1/documentation/api/latest/reference/config.html",
    "google.api_core.retry": "https://googleapis.dev/python/google-api-core/latest/retry.html",
    "google.auth": "https://googleapis.dev/python/google-auth/latest/reference/google.auth.html",
    "google.auth.exceptions": "https://googleapis.dev/python/google-auth/latest/reference/google.auth.exceptions.html",
    "google.cloud": "https://cloud.google.com/python/docs/reference/storage/latest",
    "google.protobuf": "https://googleapis.dev/python/protobuf/latest/",
    "google.protobuf.descriptor": "https://googleapis.dev/python/protobuf/latest/google/protobuf/descriptor.html",
    "google.protobuf.message": "https://googleapis.dev/python/protobuf/latest/google/protobuf/message.html",
    "grpc": "https://grpc.github.io/grpc/python/grpc.html",
    "hpack": "https://python-hyper.org/projects/hpack/en/latest/api.html",
    "jinja2": "https://jinja.palletsprojects.com/en/stable/api/",
    "jinja2.ext": "https://jinja.palletsprojects.com/en/stable/extensions/#loop-controls",
    "jinja2.sandbox": "https://jinja.palletsprojects.com/en/stable/sandbox/",
    "tokenizers": "https://huggingface.co/docs/tokenizers/api/tokenizer",
    "httptools": "https://github.com/MagicStack/httptools#apis",
    "httpx": "https://www.python-httpx.org/api/",
    "matplotlib": "https://matplotlib.org/stable/api/index.html",
    "matplotlib.pyplot": "https://matplotlib.org/stable/api/pyplot_summary.html",
    "mlflow": "https://mlflow.org/docs/latest/python_api/mlflow.html",
    "mlflow.models": "https://mlflow.org/docs/latest/python_api/mlflow.models.html",
    "mlflow.pyfunc": "https://mlflow.org/docs/latest/python_api/mlflow.pyfunc.html",
    "numpy": "https://numpy.org/doc/stable/reference/",
    "numpy.typing": "https://numpy.org/doc/stable/reference/typing.html",
    "onnx": "https://onnx.ai/onnx/api/",
    "onnxruntime": "https://onnxruntime.ai/docs/api/python/api_summary.html",
    "orjson": "https://github.com/ijl/orjson#readme",
    "pandas": "https://pandas.pydata.org/docs/reference/",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter": (
        "https://opentelemetry-python.readthedocs.io/en/stable/exporter/otlp/otlp.html"
    ),
    "opentelemetry.propagate": "https://opentelemetry-python.readthedocs.io/en/stable/api/propagate.html",
    "opentelemetry.sdk.resources": "https://opentelemetry-python.readthedocs.io/en/stable/sdk/resources.html",
    "opentelemetry.sdk.trace": "https://opentelemetry-python.readthedocs.io/en/stable/sdk/trace.html",
    "opentelemetry.sdk.trace.export": "https://opentelemetry-python.readthedocs.io/en/stable/sdk/trace.export.html",
    "opentelemetry.trace": "https://opentelemetry-python.readthedocs.io/en/stable/api/trace.html",
    "prometheus_client": "https://prometheus.github.io/client_python/",
    "prometheus_client.core": "https://prometheus.github.io/client_python/collector/custom/",
    "psutil": "https://psutil.readthedocs.io/en/latest/",
    "regex": "https://github.com/mrabarnett/mrab-regex#readme",
    "rich.console": "https://rich.readthedocs.io/en/stable/reference/console.html",
    "rich.live": "https://rich.readthedocs.io/en/stable/reference/live.html",
    "rich.markup": "https://rich.readthedocs.io/en/stable/reference/markup.html",
    "rich.progress": "https://rich.readthedocs.io/en/stable/reference/progress.html",
    "rich.progress_bar": "https://rich.readthedocs.io/en/stable/reference/progress_bar.html",
    "rich.table": "https://rich.readthedocs.io/en/stable/reference/table.html",
    "rich.text": "https://rich.readthedocs.io/en/stable/reference/text.html",
    "tensorrt": "https://docs.nvidia.com/deeplearning/tensorrt/api/python_api/",
    "torch": "https://pytorch.org/docs/stable/",
    "transformers": "https://huggingface.co/docs/transformers/main_classes/model",
    # the python backend's module: tcli provides it (server/backends/python/pb_utils) to the models
    "triton_python_backend_utils": "https://github.com/triton-inference-server/python_backend#usage",
    # Triton's generated protobuf modules, the documented way to build its messages in Python
    "tritonclient.grpc": "https://github.com/triton-inference-server/client#python-client-library",
    "tritonclient.grpc.model_config_pb2": "https://github.com/triton-inference-server/client/tree/main/src/python/library/tritonclient/grpc",
    "typer": "https://typer.tiangolo.com/reference/",
    # TyperCommand, the default of the documented `cls` of Typer.command(), subclassed by tcli/help.py
    # for Click's help layout (format_options and the Click help API it overrides)
    "typer.core": "https://typer.tiangolo.com/reference/typer/#typer.Typer.command",
    "uvloop": "https://uvloop.readthedocs.io/user/index.html",
    "watchdog.events": "https://python-watchdog.readthedocs.io/en/stable/api.html#module-watchdog.events",
    "watchdog.observers": "https://python-watchdog.readthedocs.io/en/stable/api.html#module-watchdog.observers",
}
# underscore names that their library documents as public API
# The one place allowed CPython internals: stopping multiprocessing's forkserver and resource tracker
# at shutdown, which CPython offers no public way to do; each use is under `suppress`, so a Python
# that renames them only loses the early stop (process_life._stop_helpers says so)
STOPPING_HELPERS = {
    name: ("server/backends/python/process_life.py",)
    for name in ("_forkserver", "_forkserver_pid", "_resource_tracker")
}
PUBLIC_UNDERSCORE = {
    "_exit": "os._exit: https://docs.python.org/3/library/os.html#os._exit",
    "_getframe": "sys._getframe: https://docs.python.org/3/library/sys.html#sys._getframe",
    "_replace": "namedtuple: https://docs.python.org/3/library/collections.html#collections.somenamedtuple._replace",
    "_asdict": "namedtuple: https://docs.python.org/3/library/collections.html#collections.somenamedtuple._asdict",
    "_fields": "namedtuple: https://docs.python.org/3/library/collections.html#collections.somenamedtuple._fields",
    "_make": "namedtuple: https://docs.python.org/3/library/collections.html#collections.somenamedtuple._make",
}


def _sources() -> Iterator[tuple[Path, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path, ast.parse(path.read_text(), str(path))


SOURCES = list(_sources())


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"


def _imports() -> Iterator[tuple[str, str | None, str]]:
    """(module, imported name or None, where) for every absolute import outside the project."""
    for path, tree in SOURCES:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield alias.name, None, _where(path, node)
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                for alias in node.names:
                    yield node.module, alias.name, _where(path, node)


def _third_party(module: str) -> bool:
    top = module.split(".")[0]
    return top not in PACKAGES and top not in sys.stdlib_module_names and top != "__future__"


def test_no_private_module_or_name_is_imported() -> None:
    found = []
    for module, name, where in _imports():
        if module == "__future__" or module.split(".")[0] in PACKAGES:
            continue
        if any(_is_private(part) for part in module.split(".")) or (name is not None and _is_private(name)):
            found.append(f"{where}: {module}{'' if name is None else ' ' + name}")
    assert not found, "private modules or names imported:\n" + "\n".join(found)


def test_every_third_party_module_imported_is_documented() -> None:
    undocumented = sorted(
        {
            f"{where}: {module}"
            for module, _, where in _imports()
            if _third_party(module) and module not in DOCUMENTED
        }
    )
    assert not undocumented, (
        "modules imported that DOCUMENTED does not list (import a documented module instead, or list "
        "where its publisher documents this one):\n" + "\n".join(undocumented)
    )


def _own_private_names() -> set[str]:
    """Every underscore name tcli defines: attributes its classes set on `self` or `cls`, class
    members and slots, functions, module-level names and parameters."""
    names: set[str] = set()
    for _, tree in SOURCES:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls"}:
                    names.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Name) and target.id == "__slots__" for target in node.targets
            ):
                names.update(
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
    return {name for name in names if _is_private(name)}


def test_no_private_attribute_of_a_dependency_is_used() -> None:
    own = _own_private_names()
    found = []
    for path, tree in SOURCES:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _is_private(node.attr):
                name = node.attr
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in {"getattr", "hasattr", "setattr"}
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and _is_private(node.args[1].value)
            ):
                name = node.args[1].value
            else:
                continue
            if (
                name not in own
                and name not in PUBLIC_UNDERSCORE
                and _where(path, node).split(":")[0] not in (STOPPING_HELPERS.get(name, ()))
            ):
                found.append(f"{_where(path, node)}: .{name}")
    assert not found, "private attributes that tcli does not define:\n" + "\n".join(found)


def test_the_documented_list_holds_only_what_is_imported() -> None:
    """A stale entry would let a later import through unread."""
    imported = {module for module, _, _ in _imports() if _third_party(module)}
    assert not set(DOCUMENTED) - imported, (
        f"listed but no longer imported: {sorted(set(DOCUMENTED) - imported)}"
    )
