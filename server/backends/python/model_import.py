"""Import a python model file inside this process, isolated from other models.

Triton's stub imports `<version>.model` in a process of its own, with `<model>/<version>` and `<model>`
appended to sys.path. tcli hosts many models in one process, so each file gets a unique package name
(relative imports of sibling files still work), the two folders are on sys.path only while the file
is imported, and modules the model imported from its own folders are dropped from sys.modules
afterwards, so model B's `import helper` never finds model A's helper.py.
"""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
import threading
from pathlib import Path
from types import ModuleType

_PB_UTILS = "triton_python_backend_utils"
_serial = itertools.count(1)
# sys.path and sys.modules are process-wide: models loading in parallel import one at a time
_import_lock = threading.RLock()


def ensure_pb_utils() -> ModuleType:
    """Our pb_utils, importable by models as `triton_python_backend_utils` (replacing any other module of
    that name, e.g. a typing stub installed in the environment)."""
    from server.backends.python import triton_python_backend_utils as pb_utils

    if sys.modules.get(_PB_UTILS) is not pb_utils:
        sys.modules[_PB_UTILS] = pb_utils
    return pb_utils


def import_model_file(
    model_file: Path, model_name: str, *, own_process: bool = False, python_based: bool = False
) -> ModuleType:
    """Execute `model_file` as a fresh module and return it. Exceptions from the model's code (SyntaxError,
    ImportError, anything it raises at import) propagate unchanged; nothing stays registered on failure.

    In an instance's own process (`own_process`) the module is also registered under its file's stem
    (`model`), as Triton's stub imports it: models that import themselves by that name (e.g.
    `unittest.main("model")`) find it. In the server's process many models share sys.modules, so
    none gets that name there.

    A Python-based backend's file (`python_based`: <backend directory>/<backend>/model.py) has only its
    own folder on sys.path, as Triton's stub sets it up for one."""
    ensure_pb_utils()
    model_file = model_file.resolve()
    version_dir = model_file.parent
    model_dir = version_dir if python_based else version_dir.parent
    package = f"_tcli_model_{re.sub(r'[^0-9A-Za-z_]', '_', model_name)}_{version_dir.name}_{next(_serial)}"
    module_name = f"{package}.{model_file.stem}"

    package_module = ModuleType(package)
    package_module.__path__ = [str(version_dir)]
    package_module.__package__ = package
    spec = importlib.util.spec_from_file_location(module_name, model_file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {model_file}: not a Python source file")
    module = importlib.util.module_from_spec(spec)

    with _import_lock:
        before = set(sys.modules)
        added = [p for p in dict.fromkeys((str(version_dir), str(model_dir))) if p not in sys.path]
        sys.path.extend(added)  # appended, as Triton does: installed packages win over same-named files
        sys.modules[package] = package_module
        sys.modules[module_name] = module
        if own_process:
            sys.modules[model_file.stem] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            forget_module(module)
            if own_process:
                sys.modules.pop(model_file.stem, None)
            raise
        finally:
            for path in added:
                if path in sys.path:
                    sys.path.remove(path)
            _forget_local_modules(before, model_dir, keep=module)
    return module


def forget_module(module: ModuleType) -> None:
    """Drop a module made by import_model_file, its package and the package's other modules (files
    the model imported relatively) from sys.modules."""
    package = module.__name__.rpartition(".")[0]
    # list() copies the keys in one step; iterating sys.modules itself races with imports elsewhere
    for name in [n for n in list(sys.modules) if n == package or n.startswith(package + ".")]:
        sys.modules.pop(name, None)


def _forget_local_modules(before: set[str], model_dir: Path, keep: ModuleType) -> None:
    """Remove modules imported during the model's import whose files live in the model's folders
    (but `keep`, the model itself, under whatever name it was registered)."""
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if name.startswith("_tcli_model_") or not file or module is keep:
            continue
        try:
            inside = Path(file).resolve().is_relative_to(model_dir)
        except (OSError, ValueError):
            inside = False
        if inside:
            sys.modules.pop(name, None)
