"""`tcli serve` in a process of its own, as a user runs it: its resident memory is the server's alone
(not the test's), and requests come from another process too (`drive`)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

TCLI = Path(sys.executable).parent / "tcli"

# add_sub requests from a client process: protocol, host:port and count in argv
DRIVER = """
import sys
import numpy as np
protocol, url, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
if protocol == "http":
    import tritonclient.http as client
else:
    import tritonclient.grpc as client
server = client.InferenceServerClient(url)
inputs = [client.InferInput("INPUT0", [4], "FP32"), client.InferInput("INPUT1", [4], "FP32")]
for i in range(count):
    a = np.full(4, i, np.float32)
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones(4, np.float32))
    result = server.infer("add_sub", inputs)
    assert result.as_numpy("OUTPUT0")[0] == i + 1, result.as_numpy("OUTPUT0")
"""


def drive(protocol: str, url: str, count: int) -> None:
    """`count` add_sub requests over `protocol` ("http" or "grpc"), one after another, each checked."""
    subprocess.run([sys.executable, "-c", DRIVER, protocol, url, str(count)], check=True, timeout=600)


class ServeProcess:
    """`tcli serve <flags>` (or `tritonserver <flags>`, `program="tritonserver"`) on 127.0.0.1 and
    free ports; the constructor returns once the server prints that it started (every start-up model
    loaded); `env` is added to the environment it starts with."""

    def __init__(self, *flags: str, program: str = "tcli", env: dict[str, str] | None = None) -> None:
        ports = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
        command = [str(TCLI), "serve"] if program == "tcli" else [str(TCLI.parent / program)]
        self.process = subprocess.Popen(
            [*command, *flags, "--http-address", "127.0.0.1", *ports],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "COLUMNS": "200", **(env or {})},
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.http_port = self.grpc_port = self.openai_port = 0
        deadline = time.monotonic() + 120
        assert self.process.stdout is not None
        while time.monotonic() < deadline and not self.http_port:
            line = self.process.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            match = re.search(r"Started HTTPS? on [\d.]+:(\d+), gRPC(?: \(TLS\))? on [\d.]+:(\d+)", line)
            if match:
                self.http_port, self.grpc_port = int(match.group(1)), int(match.group(2))
                openai = re.search(r"OpenAIS? on [\d.]+:(\d+)", line)
                self.openai_port = int(openai.group(1)) if openai else 0
        if not self.http_port:
            self.stop()
            raise AssertionError("tcli serve did not start:\n" + "".join(self.lines))
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def resident_mb(self) -> float:
        """Resident memory of the server and the processes it started (python model instances)."""
        server = psutil.Process(self.process.pid)
        processes = [server, *server.children(recursive=True)]
        return sum(p.memory_info().rss for p in processes) / 2**20

    def output(self) -> str:
        return "".join(self.lines)

    def wait_for_output(self, text: str, timeout: float = 30.0) -> None:
        """Until the server has printed `text` (its output is read by a thread of its own)."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert time.monotonic() < deadline, f"the server never printed {text!r}"
            time.sleep(0.02)  # polling interval, not an assumed duration

    def stop(self) -> int:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait(10)
