"""Model files are compiled once per distinct source text (a repository may hold thousands of copies of
one model.py, and each file is imported twice): each copy still reports its own file in tracebacks,
and an edited file runs its new text."""

from __future__ import annotations

import traceback
from pathlib import Path

from server.backends.python.model_import import forget_module, import_model_file

SOURCE = """
def fail():
    raise ValueError("from inside")

VALUE = {value}
"""


def _write(root: Path, name: str, value: int) -> Path:
    path = root / name / "1" / "model.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SOURCE.format(value=value))
    return path


def _failing_file(module: object) -> str:
    try:
        module.fail()  # type: ignore[attr-defined]
    except ValueError as error:
        return traceback.extract_tb(error.__traceback__)[-1].filename
    raise AssertionError("fail() did not raise")


def test_copies_of_one_source_each_name_their_own_file(tmp_path: Path) -> None:
    first, second = _write(tmp_path, "a", 1), _write(tmp_path, "b", 1)
    modules = [import_model_file(first, "a"), import_model_file(second, "b")]
    try:
        assert [_failing_file(m) for m in modules] == [str(first.resolve()), str(second.resolve())]
        assert [m.__file__ for m in modules] == [str(first.resolve()), str(second.resolve())]
    finally:
        for module in modules:
            forget_module(module)


def test_an_edited_file_runs_its_new_text(tmp_path: Path) -> None:
    path = _write(tmp_path, "a", 1)
    before = import_model_file(path, "a")
    path.write_text(SOURCE.format(value=2))
    after = import_model_file(path, "a")
    try:
        assert (before.VALUE, after.VALUE) == (1, 2)
    finally:
        forget_module(before)
        forget_module(after)


HELPER_USER = """
def use_helper():
    from . import helper  # imported while the model serves, after its import finished
    return helper.VALUE
"""


def test_forgotten_models_leave_nothing_in_sys_modules(tmp_path: Path) -> None:
    """What an import entered goes at once; modules a model imported later go with a sweep of
    sys.modules that many unloads share (one per unload made stopping 10,000 models quadratic)."""
    import sys

    packages = []
    # the sweep waits for a share of sys.modules' size in forgotten packages: enough of them
    for index in range(len(sys.modules) // 64 + 2):
        path = tmp_path / f"m{index}" / "1" / "model.py"
        path.parent.mkdir(parents=True)
        path.write_text(HELPER_USER)
        (path.parent / "helper.py").write_text(f"VALUE = {index}")
        module = import_model_file(path, f"m{index}")
        assert module.use_helper() == index  # type: ignore[attr-defined]
        package = module.__name__.rpartition(".")[0]
        assert f"{package}.helper" in sys.modules
        forget_module(module)
        assert package not in sys.modules and module.__name__ not in sys.modules
        packages.append(package)
    left = [n for n in sys.modules for p in packages if n == p or n.startswith(p + ".")]
    assert len(left) < len(packages) // 2, left  # swept, but for the packages forgotten since
