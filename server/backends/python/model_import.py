"""Import a python model file inside this process, isolated from other models.

Triton's stub imports `<version>.model` in a process of its own, with `<model>/<version>` and `<model>`
appended to sys.path. tcli hosts many models in one process, so each file gets a unique package name
(relative imports of sibling files still work), the two folders are on sys.path only while the file
is imported, and modules the model imported from its own folders are dropped from sys.modules
afterwards, so model B's `import helper` never finds model A's helper.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import re
import sys
import threading
from collections import OrderedDict
from pathlib import Path
from types import CodeType, ModuleType

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
        last_before = next(reversed(sys.modules))
        added = [p for p in dict.fromkeys((str(version_dir), str(model_dir))) if p not in sys.path]
        sys.path.extend(added)  # appended, as Triton does: installed packages win over same-named files
        sys.modules[package] = package_module
        sys.modules[module_name] = module
        if own_process:
            sys.modules[model_file.stem] = module
        try:
            if model_file.suffix == ".py":
                exec(_compiled(model_file), module.__dict__)  # what exec_module does, less the compile
            else:
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
            new_names = _added_since(last_before)
            _forget_local_modules(new_names, model_dir, keep=module)
            if sys.modules.get(module_name) is module:  # imported: remember what to forget later
                _package_names[package] = [
                    n for n in new_names if n == package or n.startswith(package + ".")
                ]
    return module


# compiled model files by their source's digest, newest last: a model's file is imported twice (its
# config's auto-completion, then each instance) and large repositories hold many copies of one file
_compiled_sources: OrderedDict[bytes, CodeType] = OrderedDict()
_COMPILED_KEPT = 256


def _compiled(model_file: Path) -> CodeType:
    """The module code of `model_file`, compiled once per distinct source text."""
    source = model_file.read_bytes()
    key = hashlib.blake2b(source, digest_size=16).digest()
    code = _compiled_sources.get(key)
    if code is None:
        code = compile(source, str(model_file), "exec", dont_inherit=True)
    _compiled_sources[key] = code
    _compiled_sources.move_to_end(key)
    while len(_compiled_sources) > _COMPILED_KEPT:
        _compiled_sources.popitem(last=False)
    return code if code.co_filename == str(model_file) else _renamed(code, str(model_file))


def _renamed(code: CodeType, filename: str) -> CodeType:
    """`code` as compiled from `filename` (tracebacks name this copy's file), nested code included."""
    constants = tuple(_renamed(c, filename) if isinstance(c, CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=constants)


# the names each model package entered into sys.modules while its file was imported
_package_names: dict[str, list[str]] = {}


# packages forgotten whose other modules (imported while the model served) are yet to be swept from
# sys.modules: one pass over sys.modules serves many unloads, where a pass per unload made stopping
# 10,000 models quadratic (a minute). Package names are never reused, so a late sweep only delays
# freeing those modules.
_unswept: set[str] = set()
_unswept_lock = threading.Lock()
_SWEEP_SHARE = 512  # sweep once the packages waiting number a 512th of sys.modules


def forget_module(module: ModuleType, *, scan: bool = True) -> None:
    """Drop a module made by import_model_file, its package and the package's other modules (files
    the model imported relatively) from sys.modules. The names the import itself entered go at once;
    with `scan` the package's later modules go with the next sweep of sys.modules, which waits for a
    share of unloads. `scan=False` is enough for a module whose code has not run since
    (auto-completion)."""
    package = module.__name__.rpartition(".")[0]
    for name in [package, module.__name__, *_package_names.pop(package, [])]:
        sys.modules.pop(name, None)
    if not scan:
        return
    with _unswept_lock:
        _unswept.add(package)
        if len(_unswept) * _SWEEP_SHARE < len(sys.modules):
            return
        packages = set(_unswept)
        _unswept.clear()
    # list() copies the keys in one step; iterating sys.modules itself races with imports elsewhere
    for name in list(sys.modules):
        if name.partition(".")[0] in packages:
            sys.modules.pop(name, None)


def _added_since(last_before: str) -> list[str]:
    """The names entered into sys.modules after `last_before`, its newest key when the import began.
    A dict keeps insertion order, so they are the keys after it: walking back from the newest costs
    what the import added, where copying sys.modules costs every model loaded so far (a repository of
    10,000 models made the loads quadratic). Should `last_before` be gone, every name is returned:
    the caller keeps only modules whose files lie in the model's folders, so that stays correct."""
    added: list[str] = []
    try:
        for name in reversed(sys.modules):
            if name == last_before:
                return added
            added.append(name)
    except RuntimeError:  # another thread imported meanwhile: take the slow, safe copy
        pass
    names = list(sys.modules)  # one step, as in forget_module
    return names[names.index(last_before) + 1 :] if last_before in names else names


def _forget_local_modules(added: list[str], model_dir: Path, keep: ModuleType) -> None:
    """Remove modules imported during the model's import whose files live in the model's folders
    (but `keep`, the model itself, under whatever name it was registered)."""
    for name in added:
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
