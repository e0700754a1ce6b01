"""A process that serves models, signalled as a user or a supervisor does, and what it must leave
behind: nothing. Used by the signal tests (test_signals_*.py).

`Run.start()` starts the program in a session of its own (so that every process it starts, the zygote,
the resource tracker and the instance processes, is found by its session id, even once re-parented),
with SIGINT's default action (a test suite run in the background ignores SIGINT, and a child inherits
that). `Run.finish()` waits up to DEADLINE_S after the last signal, then checks the exit code, the
output, /dev/shm and the session.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

REPO = Path(__file__).resolve().parents[2] / "model_repository"
TCLI = Path(sys.executable).parent / "tcli"
DEADLINE_S = 5.0  # from the (last) signal to the end of the process and of everything it started
STARTED = "Started HTTP on"  # `tcli serve` prints it once its front ends listen and its handler is in place
SERVE_FLAGS = ["--http-address", "127.0.0.1", "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]


def copy_repository(destination: Path) -> Path:
    """The example repository, copied (the tests may add to it)."""
    repo = destination / "model_repository"
    shutil.copytree(REPO, repo, ignore=shutil.ignore_patterns("__pycache__"))
    return repo


def serve_command(repo: Path, *flags: str) -> list[str]:
    return [str(TCLI), "serve", str(repo), *SERVE_FLAGS, *flags]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Run:
    """One run of `command` in `cwd`, signalled by the test."""

    command: list[str]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)  # added to the test's environment
    process: subprocess.Popen[str] = field(init=False)
    signalled_at: float = field(init=False, default=0.0)
    _out: list[str] = field(init=False, default_factory=list)
    _err: list[str] = field(init=False, default_factory=list)
    _readers: list[threading.Thread] = field(init=False, default_factory=list)

    def start(self) -> Run:
        self.process = subprocess.Popen(
            self.command,
            cwd=self.cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COLUMNS": "200", **self.env},
            start_new_session=True,
            preexec_fn=_default_sigint,
        )
        self._readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in ((self.process.stdout, self._out), (self.process.stderr, self._err))
        ]
        for reader in self._readers:
            reader.start()
        return self

    def _read(self, stream: IO[str], lines: list[str]) -> None:
        for line in stream:
            lines.append(line)

    def output(self) -> str:
        """Its stdout and stderr so far."""
        return "".join(self._out) + "".join(self._err)

    def wait_for(self, ready: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
        """Until `ready()` (the program's output or a file it writes), or fail naming `what`."""
        deadline = time.monotonic() + timeout
        while not ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill_session()
                raise AssertionError(f"never {what}; output:\n{self.output()[-5000:]}")
            time.sleep(0.02)  # polling interval, not an assumed duration

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, number: int, group: bool) -> None:
        """`number` to the process, or to its whole process group as a terminal's Ctrl-C is."""
        with contextlib.suppress(ProcessLookupError):  # it ended already
            if group:
                os.killpg(self.pid, number)
            else:
                os.kill(self.pid, number)
        self.signalled_at = time.monotonic()

    def finish(self) -> tuple[int, str, str]:
        """Wait for the end (DEADLINE_S after the last signal; killed and failed past it) and check
        that nothing is left: no process of its session, no shared memory of its own. Returns the exit
        code (negative: the signal that ended it) and its stdout and stderr."""
        deadline = self.signalled_at + DEADLINE_S
        try:
            self.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            left = self.session()
            self.kill_session()
            self.process.wait()
            raise AssertionError(
                f"still running {DEADLINE_S} s after the signal (processes: {left})\n"
                f"output:\n{self.output()[-5000:]}"
            ) from None
        for reader in self._readers:  # its output to the end (a process it left may hold the pipes)
            reader.join(max(0.1, deadline - time.monotonic()))
        out, err = "".join(self._out), "".join(self._err)
        left = self.session()
        while left and time.monotonic() < deadline:  # a process it stopped may take a moment to go
            time.sleep(0.02)  # polling interval, not an assumed duration
            left = self.session()
        self.kill_session()
        segments = sorted(p.name for p in Path("/dev/shm").glob(f"tcli{self.pid}_*"))
        for name in segments:  # not left for the next test
            with contextlib.suppress(OSError):
                (Path("/dev/shm") / name).unlink()
        assert not left, f"processes left behind: {left}\nstderr:\n{err[-5000:]}"
        assert not segments, f"shared memory left behind: {segments}\nstderr:\n{err[-5000:]}"
        for text in (out, err):
            if text is err and interpreter_starting(err):
                continue
            assert "Traceback" not in text, f"a traceback:\n{text[-5000:]}"
            assert "leaked" not in text, f"the resource tracker found leaks:\n{text[-5000:]}"
        return self.process.returncode, out, err

    def session(self) -> list[str]:
        """The processes of its session still running (the program itself excluded)."""
        found = []
        for process in psutil.process_iter(["pid", "name", "status"]):
            with contextlib.suppress(psutil.Error, OSError):
                if process.pid == self.pid or process.info["status"] == psutil.STATUS_ZOMBIE:
                    continue
                if os.getsid(process.pid) == self.pid:
                    found.append(f"{process.pid} {' '.join(process.cmdline())[:160]}")
        return found

    def kill_session(self) -> None:
        for process in psutil.process_iter(["pid"]):
            with contextlib.suppress(psutil.Error, OSError):
                if os.getsid(process.pid) == self.pid:
                    process.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)


def interpreter_starting(err: str) -> bool:
    """Whether the signal met the Python interpreter's own start-up (its site import, before any of
    tcli's code runs): every Python program then fails with "Fatal Python error: init_..." and a
    traceback whose frames are all the interpreter's frozen modules, and exit code 1. Nothing of
    tcli's can run earlier (tcli.startup_signals is its first import)."""
    if not err.lstrip().startswith("Fatal Python error: init_"):
        return False
    frames = re.findall(r'^\s*File "([^"]*)"', err, flags=re.MULTILINE)
    return all(frame.startswith("<frozen ") for frame in frames)


def tritons_code(number: int, started: bool) -> int:
    """tritonserver's exit on `number`: 0 once its handler is in place (it stops gracefully), before
    that killed by the signal (measured on 2.51: -2 and -15 at 0.3 s and 1 s, 0 at 6 s)."""
    return 0 if started else -number


def signal_after(repo: Path, cwd: Path, number: int, delay: float, group: bool) -> None:
    """`tcli serve repo`, `number` `delay` seconds after it starts: it ends as tritonserver would,
    within DEADLINE_S, leaving nothing."""
    run = Run(serve_command(repo), cwd).start()
    time.sleep(delay)  # the moment of the signal is what the test varies, not a wait for something
    run.send(number, group)
    code, out, err = run.finish()
    started = STARTED in out + err
    if interpreter_starting(err):
        assert code == 1, f"exit code {code} when the interpreter could not start; stderr:\n{err[-3000:]}"
        return
    assert code == tritons_code(number, started), (
        f"exit code {code} for {signal.Signals(number).name} at {delay:.1f} s "
        f"({'serving' if started else 'starting'}); stderr:\n{err[-3000:]}"
    )
