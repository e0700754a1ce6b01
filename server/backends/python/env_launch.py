"""Starting an instance process under another Python: an execution environment's interpreter
(`execution_env`), with its own sys.path and environment variables.

`EnvContext` is a multiprocessing context like "spawn" (the same child bootstrap, the same pickled
process object and connections), with three differences, all decided here and not through
multiprocessing's module globals (its executable is one per server, and other instances start
concurrently):
- the executable is the environment's python, started through `env` so that the environment's
  variables are set before the interpreter starts, as Triton's activation sets them: VIRTUAL_ENV,
  PATH and LD_LIBRARY_PATH lead with the environment's, and PYTHONHOME is unset;
- the child's sys.path is the environment's own (its standard library and site-packages) behind a
  folder holding only tcli's `server` package: spawn would hand it the server's sys.path, whose
  site-packages (numpy and the rest) would shadow the environment's;
- the child's sys.argv is [""], as in Triton's stub, not the server's command line.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import context as mp_context
from multiprocessing import popen_spawn_posix, reduction, spawn, util
from typing import Any


@dataclass(frozen=True)
class Launch:
    """How to start a process under an environment."""

    python: str  # the interpreter to run
    sys_path: tuple[str, ...]  # the child's whole sys.path
    env: Mapping[str, str | None]  # variables to set (None: unset)


class EnvContext(mp_context.BaseContext):
    """A "spawn"-like context whose processes run under `launch`."""

    _name = "spawn"

    def __init__(self, launch: Launch) -> None:
        self.launch = launch

    def Process(self, *args: Any, **kwargs: Any) -> EnvProcess:  # multiprocessing's name
        process = EnvProcess(*args, **kwargs)
        process.launch = self.launch
        return process


class EnvProcess(mp_context.SpawnProcess):
    launch: Launch

    @staticmethod
    def _Popen(process_obj: Any) -> Any:  # multiprocessing's name
        return _EnvPopen(process_obj)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("launch", None)  # the child needs none of it
        return state


class _EnvPopen(popen_spawn_posix.Popen):
    """spawn's Popen, launching the way `EnvProcess.launch` says (the rest, waiting, terminating and
    the pipes' clean-up, is spawn's own)."""

    _fds: list[int]  # set by spawn's __init__: what the child inherits

    def _launch(self, process_obj: EnvProcess) -> None:
        from multiprocessing import resource_tracker

        launch = process_obj.launch
        tracker_fd: int = resource_tracker.getfd()  # type: ignore[assignment]  # started by getfd()
        self._fds.append(tracker_fd)
        prep = spawn.get_preparation_data(process_obj.name)
        prep["sys_path"] = list(launch.sys_path)
        prep["sys_argv"] = [""]
        for key in ("init_main_from_name", "init_main_from_path"):  # the server's __main__ is not for it
            prep.pop(key, None)
        data = io.BytesIO()
        mp_context.set_spawning_popen(self)  # connections in the args are handed over as fds
        try:
            reduction.dump(prep, data)
            reduction.dump(process_obj, data)
        finally:
            mp_context.set_spawning_popen(None)
        parent_r = child_w = child_r = parent_w = None
        try:
            parent_r, child_w = os.pipe()
            child_r, parent_w = os.pipe()
            self._fds.extend([child_r, child_w])
            command = _command(launch, tracker_fd, child_r)
            self.pid = util.spawnv_passfds(os.fsencode(command[0]), command, self._fds)
            self.sentinel = parent_r
            with open(parent_w, "wb", closefd=False) as pipe:
                pipe.write(data.getbuffer())
        finally:
            self.finalizer = util.Finalize(
                self, _close, [fd for fd in (parent_r, parent_w) if fd is not None]
            )
            for fd in (child_r, child_w):
                if fd is not None:
                    os.close(fd)


def _close(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


def _command(launch: Launch, tracker_fd: int, pipe_handle: int) -> list[str]:
    boot = (
        "from multiprocessing.spawn import spawn_main; "
        f"spawn_main(tracker_fd={tracker_fd}, pipe_handle={pipe_handle})"
    )
    settings = [f"{key}={value}" for key, value in launch.env.items() if value is not None]
    unset = [arg for key, value in launch.env.items() if value is None for arg in ("-u", key)]
    return [_env_program(), *unset, *settings, launch.python, "-c", boot, "--multiprocessing-fork"]


def _env_program() -> str:
    return shutil.which("env") or "/usr/bin/env"


def activated(
    root: str, base: Mapping[str, str], prepend: Sequence[tuple[str, str]]
) -> dict[str, str | None]:
    """The variables an activated environment at `root` has on top of `base` (the server's): each of
    `prepend`'s (variable, folder under root) leads its variable."""
    env: dict[str, str | None] = {"VIRTUAL_ENV": root, "PYTHONHOME": None}
    for key, folder in prepend:
        path = os.path.join(root, folder)
        env[key] = f"{path}{os.pathsep}{base[key]}" if base.get(key) else path
    return env
