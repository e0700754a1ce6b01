"""Locate and run the REAL Triton Inference Server 2.51 (CPU, python backend only).

It is installed by `../shared/reference/setup-triton.sh` into ~/.cache/triton-reference, or
into the folder named by the environment variable TRITON_REFERENCE_DIR. Typical use:

    triton = find_reference_triton()          # None when it is not installed
    with RealTriton(triton, repo) as server:   # started and READY, killed on exit
        client = tritonclient.http.InferenceServerClient(server.http_address)

Tests call `require_reference_triton()`, which skips with the setup hint when it is missing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

SETUP_HINT = "../shared/reference/setup-triton.sh"


def reference_dir() -> Path:
    return Path(os.environ.get("TRITON_REFERENCE_DIR") or Path.home() / ".cache" / "triton-reference")


def find_reference_triton() -> Path | None:
    """The real `tritonserver` launcher (bin/tritonserver), or None if it is not installed."""
    binary = reference_dir() / "bin" / "tritonserver"
    return binary if binary.is_file() and os.access(binary, os.X_OK) else None


def require_reference_triton() -> Path:
    """The real `tritonserver`, or skip the calling test with a clear reason."""
    import pytest

    binary = find_reference_triton()
    if binary is None:
        pytest.skip(
            f"real Triton not installed: no executable {reference_dir() / 'bin' / 'tritonserver'}; "
            f"run {SETUP_HINT} (or set TRITON_REFERENCE_DIR)"
        )
    return binary


def free_port() -> int:
    """A TCP port that was free a moment ago (bind to port 0 and let the kernel choose)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TritonStartError(RuntimeError):
    pass


class RealTriton:
    """One real tritonserver process on free ports, READY on return from start().

    `args` are extra command-line flags (e.g. ["--model-control-mode=explicit"]). With
    `require_ready=False`, start() waits only for /v2/health/live (for repositories with models
    that fail; pass "--exit-on-error=false" too). The server log (stdout and stderr) goes to
    `log_path`, readable with `log()` also after stop(); without a log_path it goes to a
    temporary file that leaving the `with` block deletes. `probe_headers` go with the readiness
    probe (for a server started with --http-restricted-api=health:...).
    """

    def __init__(
        self,
        binary: Path,
        model_repository: Path | str,
        args: Sequence[str] = (),
        *,
        ready_timeout: float = 60.0,
        require_ready: bool = True,
        log_path: Path | None = None,
        probe_headers: dict[str, str] | None = None,
    ) -> None:
        self.binary = binary
        self.probe_headers = dict(probe_headers or {})  # sent with the readiness probe (restricted health)
        # a bucket path stays a string: Path would fold the "//" of s3://
        self.model_repository = (
            model_repository if isinstance(model_repository, str) else Path(model_repository)
        )
        self.args = list(args)
        self.ready_timeout = ready_timeout
        self.require_ready = require_ready
        self.http_port = self.grpc_port = self.metrics_port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._own_log = log_path is None
        if log_path is None:
            handle, name = tempfile.mkstemp(prefix="tritonserver-", suffix=".log")
            os.close(handle)
            log_path = Path(name)
        self.log_path = Path(log_path)

    # --------------------------------------------------------------------------- addresses
    @property
    def http_address(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    # --------------------------------------------------------------------------- lifecycle
    def start(self) -> RealTriton:
        """Start on fresh ports; retry (up to 3 times) only if a port was taken meanwhile."""
        for _attempt in range(3):
            self.http_port, self.grpc_port, self.metrics_port = free_port(), free_port(), free_port()
            self._spawn()
            try:
                self._wait_ready()
                return self
            except TritonStartError:
                self.stop()
                if "address already in use" not in self.log().lower():
                    raise
            except BaseException:  # e.g. KeyboardInterrupt: never leave a server behind
                self.stop()
                raise
        raise TritonStartError(f"tritonserver could not bind free ports; log:\n{self.log()[-4000:]}")

    def _spawn(self) -> None:
        command = [
            str(self.binary),
            f"--model-repository={self.model_repository}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--http-address=127.0.0.1",
            "--grpc-address=127.0.0.1",
            *self.args,
        ]
        # own process group, so stop() also ends the python backend stub processes
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _wait_ready(self) -> None:
        """Poll /v2/health/ready until 200, the process exits, or the deadline passes."""
        assert self.process is not None
        path = "/v2/health/ready" if self.require_ready else "/v2/health/live"
        url = f"http://{self.http_address}{path}"
        deadline = time.monotonic() + self.ready_timeout
        delay = 0.05
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise TritonStartError(
                    f"tritonserver exited with status {self.process.returncode}; log:\n{self.log()[-4000:]}"
                )
            with (
                contextlib.suppress(urllib.error.URLError, OSError),
                urllib.request.urlopen(
                    urllib.request.Request(url, headers=self.probe_headers), timeout=1.0
                ) as response,
            ):
                if response.status == 200:
                    return
            time.sleep(delay)  # polling interval, not a wait for an assumed duration
            delay = min(delay * 1.5, 0.5)
        raise TritonStartError(
            f"tritonserver not ready after {self.ready_timeout:.0f} s; log:\n{self.log()[-4000:]}"
        )

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the server's process group, SIGKILL it if it has not exited in `timeout` s."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        # stubs that outlived the server (they normally exit with it)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)

    def __enter__(self) -> RealTriton:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if self._own_log:
            self.log_path.unlink(missing_ok=True)
