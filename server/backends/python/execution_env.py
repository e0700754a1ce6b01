"""Execution environments, as Triton's python backend has them: the model config parameter
EXECUTION_ENV_PATH names a packed environment (a conda-pack or venv-pack archive, `.tar.gz`) or a
folder holding one unpacked, and the model's instances run under that environment's python.

    parameters { key: "EXECUTION_ENV_PATH" value { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }

As in Triton, `$$TRITON_MODEL_DIRECTORY` is replaced by the model's folder (a bucket's model: its
local copy), and any other relative path is taken from the server's working directory. Triton runs
its stub with the environment's libraries; tcli runs the environment's own `bin/python`, with
VIRTUAL_ENV, PATH and LD_LIBRARY_PATH set as Triton's activation sets them (`env_launch`).

An archive is unpacked once, into a cache keyed by its content (sha256), shared by every model and
server on the machine: `$TCLI_EXECUTION_ENV_CACHE`, else `$XDG_CACHE_HOME/tcli/execution-envs`
(`~/.cache/tcli/execution-envs`). A lock file per archive serializes concurrent unpacks (two
instances or models, or two servers); a folder counts once it holds its completion marker. A
conda-pack archive's `bin/conda-unpack` is run once there, which fixes the prefixes baked into the
environment (Triton leaves that to the user). Unlike Triton, tcli does not need `bin/activate`.

Before the first instance starts, the environment's python is asked, once per environment, for its
version, its sys.path and whether it can run tcli's instance worker (Python 3.11 or newer, numpy):
an environment that cannot fails the load with one line saying which and why.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from server.protocol.errors import ErrorCode, TritonError

if TYPE_CHECKING:
    from tritonclient.grpc.model_config_pb2 import ModelConfig

    from server.backends.python.env_launch import EnvContext

PARAMETER = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"
CACHE_VARIABLE = "TCLI_EXECUTION_ENV_CACHE"
MIN_PYTHON = (3, 11)  # pyproject.toml's requires-python: the worker's own syntax and imports
_MARKER = ".tcli-unpacked"
# variables an activated environment leads with its own folder (relative to its root)
_LEADING = (("PATH", "bin"), ("LD_LIBRARY_PATH", "lib"))
_PROBE_SECONDS = 120.0  # importing numpy from a cold disk can be slow; a hung python is not waited for
# run by the environment's python (-I: its own paths only); kept to syntax old Pythons parse, so that
# a too old environment is reported by its version rather than by a syntax error
_PROBE = """
import json, sys
found = {"version": "%d.%d.%d" % tuple(sys.version_info[:3]), "path": sys.path, "missing": None}
if tuple(sys.version_info[:2]) >= tuple(json.loads(sys.argv[2])):
    try:
        import numpy
    except ImportError as exc:
        found["missing"] = "numpy" if exc.name == "numpy" else "a working numpy (%s)" % exc
    else:
        sys.path.insert(0, sys.argv[1])
        try:
            import server.backends.python.process_worker
        except Exception as exc:
            found["broken"] = str(exc) or repr(exc)
sys.stdout.write(json.dumps(found))
"""
# run by the environment's python with a request on stdin; the model's own prints go to stderr
_AUTO_COMPLETE = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from server.backends.python.autocomplete import complete_by_model
from server.protocol.errors import TritonError
answer_to, sys.stdout = sys.stdout, sys.stderr
request = json.loads(sys.stdin.read())
try:
    found = {"config": complete_by_model(
        Path(request["file"]), request["name"], lambda: request["config"], python_based=request["python_based"]
    )}
except TritonError as error:
    found = {"error": [error.code.name, error.message]}
answer_to.write(json.dumps(found))
"""


@dataclass(frozen=True)
class Environment:
    """An execution environment ready to run instances."""

    configured: str  # EXECUTION_ENV_PATH, substituted: what error lines name
    root: Path  # the unpacked environment
    python: Path
    version: str
    sys_path: tuple[str, ...]  # its own, as its python starts (-I)


def configured_path(config: ModelConfig, model_dir: Path) -> Path | None:
    """EXECUTION_ENV_PATH with $$TRITON_MODEL_DIRECTORY replaced (its first use, as Triton does), or
    None when the config does not set it (or sets it empty: Triton then uses no environment)."""
    if PARAMETER not in config.parameters or not config.parameters[PARAMETER].string_value:
        return None
    value = config.parameters[PARAMETER].string_value
    return Path(value.replace(MODEL_DIRECTORY, str(model_dir), 1))


def problem(path: Path) -> str | None:
    """What is wrong with an EXECUTION_ENV_PATH on disk (None: nothing seen without running it)."""
    if not path.exists():
        return f"{PARAMETER} '{path}' does not exist"
    if path.is_dir():
        if not _python_of(path).exists():
            return f"{PARAMETER} '{path}' is a folder without bin/python: not an unpacked environment"
        return None
    try:
        is_archive = tarfile.is_tarfile(path)
    except OSError as exc:
        return f"{PARAMETER} '{path}' cannot be read: {exc.strerror or exc}"
    if not is_archive:
        return f"{PARAMETER} '{path}' is neither a folder nor a tar archive (conda-pack or venv-pack .tar.gz)"
    return None


def prepare(config: ModelConfig, model_dir: Path) -> Environment | None:
    """The model's execution environment, unpacked and checked; None when it has none. Raises the
    load's one-line error when it cannot run the model's instances."""
    path = configured_path(config, model_dir)
    if path is None:
        return None
    found = problem(path)
    if found is not None:
        raise TritonError(ErrorCode.INTERNAL, f"python model '{config.name}': {found}")
    try:
        root = path.resolve() if path.is_dir() else _unpacked(path.resolve(), config.name)
        return _checked(str(path), root, config.name)
    except OSError as exc:  # the cache: a read-only home, a full disk
        raise TritonError(
            ErrorCode.INTERNAL,
            f"python model '{config.name}': the execution environment cache {cache_root()} cannot be "
            f"written ({exc.strerror or exc}): set {CACHE_VARIABLE} to a writable folder",
        ) from None


def process_context(environment: Environment | None) -> EnvContext | None:
    """The multiprocessing context that starts an instance under `environment` (None: the default)."""
    if environment is None:
        return None
    from server.backends.python.env_launch import EnvContext, Launch, activated  # POSIX only

    variables = activated(str(environment.root), os.environ, _LEADING)
    return EnvContext(Launch(str(environment.python), (_server_shim(), *environment.sys_path), variables))


def _variables(environment: Environment) -> dict[str, str]:
    """The server's environment variables as activating `environment` changes them."""
    from server.backends.python.env_launch import activated

    variables: dict[str, str | None] = {
        **os.environ,
        **activated(str(environment.root), os.environ, _LEADING),
    }
    return {key: value for key, value in variables.items() if value is not None}


def auto_complete(
    environment: Environment, model_file: Path, model_name: str, config: dict[str, Any], python_based: bool
) -> dict[str, Any] | None:
    """`autocomplete.complete_by_model` run by the environment's python (the model's imports may exist
    only there), as Triton runs auto-complete in a throwaway stub under the environment."""
    request = {"file": str(model_file), "name": model_name, "config": config, "python_based": python_based}
    try:
        done = subprocess.run(
            [str(environment.python), "-I", "-c", _AUTO_COMPLETE, _server_shim()],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=_PROBE_SECONDS,
            env=_variables(environment),
        )
        answer = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        raise TritonError(
            ErrorCode.INTERNAL,
            f"{model_file.name} for '{model_name}': auto-complete in execution environment "
            f"'{environment.configured}' did not answer",
        ) from None
    if "error" in answer:
        code, message = answer["error"]
        raise TritonError(ErrorCode[code], message)
    completed: dict[str, Any] | None = answer["config"]
    return completed


def cache_root() -> Path:
    configured = os.environ.get(CACHE_VARIABLE)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tcli" / "execution-envs"


def _python_of(root: Path) -> Path:
    return root / "bin" / "python"


# unpacking -----------------------------------------------------------------------------------------
_digests: dict[tuple[str, int, int, int], str] = {}  # (path, inode, size, mtime) -> sha256
_digest_lock = threading.Lock()


def _digest(archive: Path) -> str:
    stat = archive.stat()
    key = (str(archive), stat.st_ino, stat.st_size, stat.st_mtime_ns)
    with _digest_lock:
        known = _digests.get(key)
    if known is not None:
        return known
    sha = hashlib.sha256()
    with archive.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            sha.update(block)
    with _digest_lock:
        _digests[key] = sha.hexdigest()
    return sha.hexdigest()


def _unpacked(archive: Path, model: str) -> Path:
    """The archive's unpacked folder in the cache, unpacking it first if no one has."""
    digest = _digest(archive)
    root = cache_root()
    target = root / digest[:32]
    if (target / _MARKER).exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f"{digest[:32]}.lock"):
        if (target / _MARKER).exists():  # another thread or server did it meanwhile
            return target
        shutil.rmtree(target, ignore_errors=True)  # a partial unpack (a crash, a full disk)
        try:
            with tarfile.open(archive, "r:*") as packed:
                _extract(packed, target)
            _conda_unpack(target, archive, model)
        except (OSError, tarfile.TarError) as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise TritonError(
                ErrorCode.INTERNAL,
                f"python model '{model}': {PARAMETER} '{archive}' could not be unpacked into {target}: {exc}",
            ) from None
        (target / _MARKER).write_text(str(archive), encoding="utf-8")
    return target


def _extract(packed: tarfile.TarFile, target: Path) -> None:
    """Every member under `target`. The "tar" filter refuses members outside it and device files;
    the links venv-pack writes to the base interpreter (absolute) stay, as libarchive keeps them for
    Triton. Pythons before 3.11.4 have no filters: names are checked here instead."""
    if hasattr(tarfile, "tar_filter"):
        packed.extractall(target, filter="tar")
        return
    for member in packed.getmembers():
        if member.name.startswith("/") or ".." in Path(member.name).parts or member.isdev():
            raise tarfile.TarError(f"member '{member.name}' would land outside the environment's folder")
    packed.extractall(target)  # checked above


def _conda_unpack(target: Path, archive: Path, model: str) -> None:
    """conda-pack's own fix-up of the unpacked environment's prefixes, run where it now lives."""
    script = target / "bin" / "conda-unpack"
    if not script.exists():
        return
    done = subprocess.run(
        [str(_python_of(target)), str(script)], cwd=target, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise TritonError(
            ErrorCode.INTERNAL,
            f"python model '{model}': bin/conda-unpack of {PARAMETER} '{archive}' failed "
            f"(exit code {done.returncode}): {last}",
        )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock between threads and processes (flock: each open() is its own holder)."""
    import fcntl  # POSIX only, as Triton's execution environments

    with path.open("a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


# checking ------------------------------------------------------------------------------------------
_checked_envs: dict[Path, Environment] = {}
_check_lock = threading.Lock()


def _checked(configured: str, root: Path, model: str) -> Environment:
    """Ask the environment's python, once per environment, whether it can run the worker."""
    with _check_lock:
        known = _checked_envs.get(root)
    if known is not None:
        return Environment(configured, known.root, known.python, known.version, known.sys_path)
    python = _python_of(root)
    named = f"python model '{model}': execution environment '{configured}'"
    try:
        done = subprocess.run(
            [str(python), "-I", "-c", _PROBE, _server_shim(), json.dumps(MIN_PYTHON)],
            capture_output=True,
            text=True,
            timeout=_PROBE_SECONDS,
            env={key: value for key, value in os.environ.items() if key != "PYTHONHOME"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TritonError(ErrorCode.INTERNAL, f"{named}: its bin/python did not run: {exc}") from None
    try:
        found = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        raise TritonError(ErrorCode.INTERNAL, f"{named}: its bin/python did not run: {last}") from None
    version = found["version"]
    needed = ".".join(map(str, MIN_PYTHON))
    if tuple(int(part) for part in version.split(".")[:2]) < MIN_PYTHON:
        raise TritonError(
            ErrorCode.INTERNAL,
            f"{named} has Python {version}; tcli's instance worker needs Python {needed} or newer: "
            f"build the environment with Python {needed} or newer",
        )
    if found["missing"] is not None:
        raise TritonError(
            ErrorCode.INTERNAL,
            f"{named} (Python {version}) lacks {found['missing']}, which tcli's instance worker needs: "
            "install numpy into the environment (and pack it again)",
        )
    if found.get("broken"):
        raise TritonError(
            ErrorCode.INTERNAL,
            f"{named} (Python {version}) cannot import tcli's instance worker: {found['broken']}",
        )
    own_path = tuple(entry for entry in found["path"] if entry)
    environment = Environment(configured, root, python, version, own_path)
    with _check_lock:
        _checked_envs[root] = environment
    return environment


_shim_lock = threading.Lock()


def _server_shim() -> str:
    """A folder holding only a link to tcli's `server` package: on an environment's sys.path it makes
    the worker importable without the server's own site-packages (numpy and the rest) coming along."""
    package = Path(__file__).resolve().parents[2]  # .../server
    root = cache_root()
    shim = root / f"server-{hashlib.sha256(str(package).encode()).hexdigest()[:16]}"
    link = shim / "server"
    with _shim_lock:
        if link.resolve() != package:
            shim.mkdir(parents=True, exist_ok=True)
            temporary = Path(tempfile.mktemp(dir=shim, prefix=".link"))
            temporary.symlink_to(package, target_is_directory=True)
            os.replace(temporary, link)  # atomic: a concurrent server sees the old link or the new
    return str(shim)
