"""The house keeps its shape: imports point down the request path, no two modules import each other,
and no module grows past a size a newcomer can read without a reason written at its top.

The layers, top to bottom, are the ones server/README.md draws. Every import counts, wherever it is
written: at the top of a module, inside a function (a lazy import is still a dependency) and under
`if TYPE_CHECKING:` (a reader still has to know the other module). Read with the standard library's
`ast`, so nothing is imported to check it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# server/'s layers, top to bottom; a module belongs to the layer of its longest matching prefix
SERVER_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("composition root", ("server.app", "server.signals")),
    ("front ends", ("server.frontends",)),
    (
        "core service",
        (
            "server.service",
            "server.metrics_snapshot",
            "server.bls",
            "server.model_control",
            "server.classification",
            "server.logs",
            "server.tracing",
        ),
    ),
    ("repository", ("server.repository",)),
    ("scheduling", ("server.scheduling",)),
    ("model configuration", ("server.config",)),
    ("backends", ("server.backends",)),
    ("protocol", ("server.protocol",)),
)
# modules longer than this say why at the top of their docstring, in a paragraph starting "Long:"
MAX_LINES = 600


def _modules(package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = {**_modules("server"), **_modules("tcli")}


def _owner(name: str) -> str | None:
    """The project module an imported name lives in (a package's own name when it is one)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports_in(source: str, module: str, is_package: bool) -> Iterator[tuple[str, int]]:
    """Every project module that `source` (the text of `module`) imports, with the line."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            # `from package import module` names a module; `from module import name` names the module
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names
            ]
        else:
            continue
        for name in names:
            owner = _owner(name)
            if owner is not None and owner != module:
                yield owner, node.lineno


def _imports(module: str) -> Iterator[tuple[str, int]]:
    path = MODULES[module]
    return _imports_in(path.read_text(), module, path.name == "__init__.py")


GRAPH = {module: sorted(set(_imports(module))) for module in MODULES}


def _layer(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer index)
    for index, (_, prefixes) in enumerate(SERVER_LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), index)
    return None if best is None else best[1]


def _cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target, _ in GRAPH[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in GRAPH:
        if module not in index:
            visit(module)
    return found


def test_every_server_module_has_a_layer() -> None:
    unplaced = [m for m in MODULES if m.startswith("server.") and _layer(m) is None]
    assert not unplaced, f"add these modules to SERVER_LAYERS (and to server/README.md): {unplaced}"


def test_no_two_modules_import_each_other() -> None:
    cycles = _cycles()
    assert not cycles, "import loops (move what both sides need below them, or pass it in): " + "; ".join(
        " <-> ".join(cycle) for cycle in cycles
    )


def test_server_imports_point_down_the_request_path() -> None:
    upward = []
    for module, targets in GRAPH.items():
        here = _layer(module)
        if here is None:
            continue
        for target, line in targets:
            there = _layer(target)
            if there is not None and there < here:
                upward.append(
                    f"{MODULES[module].relative_to(ROOT)}:{line}: {module} ({SERVER_LAYERS[here][0]}) imports "
                    f"{target} ({SERVER_LAYERS[there][0]})"
                )
    assert not upward, "imports that point up the request path:\n" + "\n".join(upward)


def test_the_server_never_imports_the_cli() -> None:
    wrong = [
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if module.startswith("server")
        for target, _ in targets
        if target.startswith("tcli")
    ]
    assert not wrong, wrong


def test_a_long_module_says_why() -> None:
    unexplained = []
    for path in MODULES.values():
        text = path.read_text()
        lines = text.count("\n")
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if lines > MAX_LINES and "\nLong: " not in f"\n{docstring}":
            unexplained.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert not unexplained, (
        "split these modules at their seams, or say why each is one module in a paragraph of its "
        "docstring starting 'Long: ': " + ", ".join(unexplained)
    )


def test_the_reader_finds_imports_of_every_kind() -> None:
    """The checks above mean something only if lazy, type-only, relative and package-style imports are
    all seen."""
    source = """
from __future__ import annotations
from typing import TYPE_CHECKING
import numpy
from server.protocol.errors import TritonError
from server.backends import base
from . import registry
if TYPE_CHECKING:
    from server.service import InferenceService
def load():
    from server.scheduling.runner import ModelRunner
    import server.scheduling.stats
"""
    found = dict(_imports_in(source, "server.backends.onnxruntime", is_package=False))
    assert found == {
        "server.protocol.errors": 5,
        "server.backends.base": 6,
        "server.backends.registry": 7,
        "server.service": 9,
        "server.scheduling.runner": 11,
        "server.scheduling.stats": 12,
    }


PAGE = ROOT / "server" / "README.md"
_PATH = re.compile(r"`((?:server|tcli|tests|benchmarks|deploy|completions|model_repository)/[\w./<>-]*)`")


def test_the_architecture_page_names_only_real_paths() -> None:
    text = PAGE.read_text()
    missing = [
        path
        for path in sorted(set(_PATH.findall(text)))
        if "<" not in path and not (ROOT / path.rstrip("/")).exists()
    ]
    assert not missing, f"server/README.md names paths that do not exist: {missing}"


def test_folders_show_the_layers() -> None:
    """Below the core service each layer is one package, so a file's folder names its layer; and a
    front end's modules sit in its transport's package, not flat beside the others."""
    for name, prefixes in SERVER_LAYERS[3:]:
        for prefix in prefixes:
            assert (ROOT / prefix.replace(".", "/") / "__init__.py").is_file(), (
                f"layer '{name}' is {prefix}, which is not a package: move its modules into one"
            )
    flat = [m for m in MODULES if m.startswith("server.frontends.http_")]
    assert flat == [], f"HTTP front-end modules belong in server/frontends/http/: {flat}"


def test_the_architecture_page_draws_the_layers_the_test_keeps() -> None:
    text = PAGE.read_text()
    for name, prefixes in SERVER_LAYERS:
        row = next((line for line in text.splitlines() if line.startswith(f"| {name} |")), None)
        assert row is not None, f"server/README.md has no row for the layer '{name}'"
        for prefix in prefixes:
            path = prefix.replace(".", "/")
            assert f"`{path}/`" in row or f"`{path}.py`" in row, f"layer '{name}' row does not name {path}"


# ------------------------------------------------------------------------------- one home per concept
FRONT_ENDS = [module for module in MODULES if module.startswith("server.frontends")]


def _modules_saying(phrase: str) -> list[str]:
    return sorted(module for module, path in MODULES.items() if phrase in path.read_text())


def _nodes(module: str) -> Iterator[tuple[str, ast.AST]]:
    """Every node of `module` with the name of the outermost function it is in (a method, for the
    functions nested in it; "" at module level)."""

    def visit(node: ast.AST, function: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            named = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            inside = child.name if named and not function else function
            yield inside, child
            yield from visit(child, inside)

    return visit(ast.parse(MODULES[module].read_text()), "")


def _calls(module: str) -> Iterator[tuple[str, str, str]]:
    """(enclosing function, receiver, method) of every `receiver.method(...)` call in `module`."""
    for function, node in _nodes(module):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            yield function, ast.unparse(node.func.value), node.func.attr


def test_tritons_unknown_model_words_have_one_home() -> None:
    assert _modules_saying("Request for unknown model") == ["server.protocol.errors"]


def test_front_ends_never_read_the_repository() -> None:
    """They go through the service (the layers above); /metrics reads the service's snapshot."""
    wrong = [
        f"{module} imports {target}"
        for module in FRONT_ENDS
        for target, _ in GRAPH[module]
        if target.startswith("server.repository")
    ]
    assert not wrong, wrong


def test_a_request_is_admitted_once_by_the_service() -> None:
    """The service resolves an inference request's model once (`InferenceService.admission`) and
    samples its trace (`sample_trace`): no front end asks whether a model is decoupled, ready or how
    it is configured on its way to infer (only the endpoints answering those questions ask), and
    nothing but the service asks the tracer to sample."""
    endpoints = {
        "model_ready": {"ModelReady", "_model_ready"},
        "model_metadata": {"ModelMetadata", "_model_metadata"},
        "model_config": {"ModelConfig", "_model_config"},
        "is_decoupled": set(),
    }
    wrong = [
        f"{module}: {function}() calls {receiver}.{method}()"
        for module in FRONT_ENDS
        for function, receiver, method in _calls(module)
        if method in endpoints and function not in endpoints[method]
    ]
    wrong += [
        f"{module}: {function}() samples a trace"
        for module in MODULES
        if module != "server.service"
        for function, receiver, method in _calls(module)
        if method == "sample" and receiver.endswith("tracer")
    ]
    assert not wrong, wrong


def test_an_error_code_has_one_http_status() -> None:
    """`ErrorCode.http_status` is Triton's table; each HTTP front end (KServe's, OpenAI's) reads it in
    one place."""
    readers = [
        (module, function)
        for module in MODULES
        if module != "server.protocol.errors"
        for function, node in _nodes(module)
        if isinstance(node, ast.Attribute) and node.attr == "http_status"
    ]
    assert readers == [
        ("server.frontends.http.app", "_error_answer"),
        ("server.frontends.openai.errors", "from_triton"),
    ], readers


def test_http_routes_are_one_table() -> None:
    """Each HTTP route (methods, path, handler, restricted group) is a `Route` of its front end's table
    (server/frontends/http/app.py; the OpenAI port's in server/frontends/openai/app.py), and a
    restricted group is checked in one place per front end: where it is matched."""
    building = {
        module
        for module in FRONT_ENDS
        for _, node in _nodes(module)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Route"
    }
    assert building == {"server.frontends.http.app", "server.frontends.openai.app"}, building
    checks = [
        (module, function)
        for module in FRONT_ENDS
        for function, receiver, method in _calls(module)
        if method == "check" and receiver.endswith("_restrictions")
    ]
    assert checks == [("server.frontends.http.app", "_route"), ("server.frontends.openai.app", "_route")], (
        checks
    )


# One home for the built-in backends: server/backends/table.py lists them (name, platforms, files,
# loader, config completion, file check). Elsewhere a backend is reached through the table, so adding
# one is one entry and one module. Two shapes give a second home away, and are refused outside it:
# a literal collection naming two or more built-in backends (a list of them, a map from them), and
# an expression compared with two or more of their names (an if-chain that picks per backend).
BACKEND_TABLE = "server.backends.table"


def _built_in_backends() -> set[str]:
    """The names the table gives its entries: the first argument of each `BuiltInBackend(...)`."""
    tree = ast.parse(MODULES[BACKEND_TABLE].read_text())
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "BuiltInBackend"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    }


BUILT_IN_BACKENDS = _built_in_backends()


def _backend_lists(source: str, names: set[str]) -> list[tuple[int, list[str]]]:
    """Literal tuples, lists, sets and dicts that name two or more of `names`, anywhere inside them
    (outermost only)."""
    found: list[tuple[int, list[str]]] = []
    inside: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)) or id(node) in inside:
            continue
        within = list(ast.walk(node))
        inside.update(id(n) for n in within)
        named = {n.value for n in within if isinstance(n, ast.Constant) and n.value in names}
        if len(named) >= 2:
            found.append((node.lineno, sorted(named)))
    return found


def _backend_choices(source: str, names: set[str]) -> list[tuple[int, list[str]]]:
    """Expressions compared (==, !=) with two or more of `names` in one module: a choice per backend."""
    first: dict[str, int] = {}  # the compared expression (its ast) -> the line of its first comparison
    compared: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare) or not all(
            isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops
        ):
            continue
        sides = [node.left, *node.comparators]
        named = {s.value for s in sides if isinstance(s, ast.Constant) and s.value in names}
        for side in sides:
            if named and not isinstance(side, ast.Constant):
                key = ast.dump(side)
                first.setdefault(key, node.lineno)
                compared.setdefault(key, set()).update(named)
    return sorted((first[key], sorted(seen)) for key, seen in compared.items() if len(seen) >= 2)


def test_the_backend_table_names_the_built_in_backends() -> None:
    assert len(BUILT_IN_BACKENDS) >= 2, f"{MODULES[BACKEND_TABLE]} lists no BuiltInBackend entries"


def test_only_the_backend_table_lists_the_built_in_backends() -> None:
    second_homes = [
        f"{path.relative_to(ROOT)}:{line}: names {', '.join(named)}"
        for module, path in MODULES.items()
        if module != BACKEND_TABLE
        for line, named in _backend_lists(path.read_text(), BUILT_IN_BACKENDS)
    ]
    assert not second_homes, (
        "built-in backends listed outside server/backends/table.py (read the table instead: "
        "table.NAMES, table.built_in(name), an entry's platforms, model_file or module):\n"
        + "\n".join(second_homes)
    )


def test_only_the_backend_table_chooses_by_built_in_backend() -> None:
    choices = [
        f"{path.relative_to(ROOT)}:{line}: compares one value with {', '.join(named)}"
        for module, path in MODULES.items()
        if module.startswith("server.") and module != BACKEND_TABLE
        for line, named in _backend_choices(path.read_text(), BUILT_IN_BACKENDS)
    ]
    assert not choices, (
        "a choice per built-in backend outside server/backends/table.py (give the entry's module the "
        "behaviour, and call it through table.built_in(name)):\n" + "\n".join(choices)
    )


def test_the_backend_checks_find_the_shapes_they_refuse() -> None:
    """The two checks above mean something only if they see a list and an if-chain of backends."""
    names = {"onnxruntime", "pytorch", "python"}
    listed = """
BUILT_IN = ("onnxruntime", "pytorch", "python")
FILES = (("model.onnx", "onnxruntime"), ("model.pt", "pytorch"))
ONE = frozenset({"onnxruntime", "tensorflow"})
"""
    assert _backend_lists(listed, names) == [
        (2, ["onnxruntime", "python", "pytorch"]),
        (3, ["onnxruntime", "pytorch"]),
    ]
    chosen = """
def load(config):
    if config.backend == "onnxruntime":
        return 1
    elif "pytorch" != config.backend:
        return 2
    return 3 if backend == "python" else 4
"""
    assert _backend_choices(chosen, names) == [(3, ["onnxruntime", "pytorch"])]


# --------------------------------------------------------------------------- one home for each concept
BYTES_CODEC = "server.protocol.bytes_codec"
DATATYPE_TABLE = "server.protocol.datatypes"
_DATATYPE_NAMES = frozenset(
    ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"]
    + ["FP16", "FP32", "FP64", "BYTES", "BF16", "TYPE_STRING"]
    + [f"TYPE_{name}" for name in ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32")]
    + [f"TYPE_{name}" for name in ("INT64", "FP16", "FP32", "FP64", "BF16")]
)
_NUMPY_TYPES = frozenset(
    [
        "bool",
        "bool_",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "int8",
        "int16",
        "int32",
        "int64",
        "float16",
        "float32",
        "float64",
        "object",
        "object_",
    ]
)


def _constant(node: ast.AST | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _bytes_codec_copies(source: str) -> list[int]:
    """Lines that write or read BYTES' 4-byte little-endian length prefix by hand: a '<I' struct
    format, `n.to_bytes(4, "little")`, `int.from_bytes(..., "little")`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if _constant(node) == "<I":
            found.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            args = [_constant(a) for a in node.args] + [_constant(k.value) for k in node.keywords]
            packs = node.func.attr == "to_bytes" and args[:1] == [4]
            if (packs or node.func.attr == "from_bytes") and "little" in args:
                found.append(node.lineno)
    return sorted(found)


def _numpy_type(node: ast.AST) -> bool:
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("np", "numpy")
    ):
        return node.attr in _NUMPY_TYPES
    return _constant(node) in _NUMPY_TYPES


def _datatype_tables(source: str) -> list[int]:
    """Lines that start a copy of the datatype table: a dict from Triton datatype names to numpy
    types, or keyed by four or more of the names (their sizes, or anything else per type), or a list
    of four or more numpy types (a table kept in parallel to a list of names)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            named = sum(_constant(key) in _DATATYPE_NAMES for key in node.keys if key is not None)
            to_numpy = sum(_numpy_type(value) for value in node.values)
            if named >= 4 or (named >= 2 and to_numpy >= 2):
                found.append(node.lineno)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and sum(map(_numpy_type, node.elts)) >= 4:
            found.append(node.lineno)
    return sorted(found)


def _copies(home: str, finder: Callable[[str], list[int]]) -> list[str]:
    return [
        f"{MODULES[module].relative_to(ROOT)}:{line}"
        for module, path in MODULES.items()
        if module != home
        for line in finder(path.read_text())
    ]


def test_the_bytes_wire_format_has_one_home() -> None:
    copies = _copies(BYTES_CODEC, _bytes_codec_copies)
    assert not copies, (
        f"BYTES length prefixes coded outside {BYTES_CODEC} (use its serialize/deserialize): {copies}"
    )


def test_the_datatype_table_has_one_home() -> None:
    copies = _copies(DATATYPE_TABLE, _datatype_tables)
    assert not copies, f"datatype tables outside {DATATYPE_TABLE} (read its TYPES): {copies}"


def test_the_one_home_checks_see_copies() -> None:
    """The two checks above mean something only if they find the copies they were written against."""
    codec_copies = """
import struct
LENGTH = struct.Struct("<I")
def pack(raw):
    return len(raw).to_bytes(4, "little") + raw
def unpack(data):
    return int.from_bytes(data[:4], byteorder="little")
frame = (7).to_bytes(4, "big")
"""
    assert _bytes_codec_copies(codec_copies) == [3, 5, 7]
    tables = """
import numpy as np
SIZES = {"FP32": 4, "INT8": 1, "UINT8": 1, "BF16": 2}
TO_NUMPY = {"TYPE_FP32": np.float32, "TYPE_INT32": np.int32}
NUMPY = (np.bool_, np.uint8, np.float32, np.object_)
NAMES = ["int8", "int16", "float32", "float64"]
SUPPORTED = {"FP32", "FP64"}
MESSAGES = {"BOOL": "not a boolean", "BYTES": "not a string"}
"""
    assert _datatype_tables(tables) == [3, 4, 5, 6]
