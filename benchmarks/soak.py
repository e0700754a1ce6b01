"""Scenario 8 [soak], a long mixed load on one `tcli serve` (issue 14): is anything lost, does anything
leak?

    .venv/bin/python benchmarks/soak.py [--minutes 60]

Five clients run side by side for the whole time, each checking every answer:
  - HTTP `add_sub` (python, in the server);
  - HTTP `soak_pid` (python, 2 instances, each in its own process; answers with its process id);
  - gRPC `simple` (onnxruntime), the model a poll-mode edit reloads every minute;
  - gRPC `simple_sequence` sequences of 5 requests (a running sum per sequence id);
  - HTTP `digits_ensemble` (python preprocessing, then onnxruntime);
  - gRPC streams to the decoupled `repeat_int32` (4 responses per request).
Every minute `simple`'s config.pbtxt is rewritten (the server polls every 2 s and reloads it); every
five minutes (--kill-every) one of `soak_pid`'s instance processes is killed with SIGKILL. Only
requests that were running on the killed instance may fail; every other failure counts against the
server. The server's resident memory and open file descriptors (with its child processes) are read
after a one-minute warm-up and at the end: flat within 10%.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import psutil

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.context import Context
from benchmarks.harness import Server, log, start_tcli
from benchmarks.repos import copy_examples
from benchmarks.table import Row

EXAMPLES = ("add_sub", "simple", "simple_sequence", "digits_ensemble", "digits_preprocess", "digits_onnx")
EXAMPLES += ("repeat_int32",)
PID_MODEL = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pid = np.array([os.getpid()], dtype=np.int64)
        answers = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            answers.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", value), pb_utils.Tensor("PID", pid)]))
        return answers
"""
PID_CONFIG = """
name: "soak_pid"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "TCLI_INSTANCE_PROCESS" value: { string_value: "true" } }
"""


@dataclass
class Tally:
    """What one client saw: requests sent, failures (by message), and those on a killed instance."""

    sent: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    on_killed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, error: str | None, killed: bool = False) -> None:
        with self.lock:
            self.sent += 1
            if error is not None and killed:
                self.on_killed += 1
            elif error is not None:
                self.failures[error[:160]] += 1


@dataclass
class Soak:
    server: Server
    repo: Path
    until: float
    tallies: dict[str, Tally] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)
    kills: list[float] = field(default_factory=list)  # when each kill happened (monotonic)

    def run_client(self, name: str, step: Callable[[], None]) -> threading.Thread:
        tally = self.tallies.setdefault(name, Tally())

        def loop() -> None:
            while time.monotonic() < self.until:
                started = time.monotonic()
                try:
                    step()
                    tally.record(None)
                except Exception as exc:  # any failure is counted, with its message
                    # a request that was running when an instance was killed may fail
                    killed = any(started - 1.0 <= k <= time.monotonic() for k in self.kills)
                    tally.record(f"{type(exc).__name__}: {exc}", killed and name == "soak_pid http")

        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        return thread


def _prepare(repo: Path) -> None:
    copy_examples(repo, EXAMPLES)
    (repo / "soak_pid" / "1").mkdir(parents=True)
    (repo / "soak_pid" / "1" / "model.py").write_text(PID_MODEL)
    (repo / "soak_pid" / "config.pbtxt").write_text(PID_CONFIG)


def _clients(soak: Soak) -> list[threading.Thread]:
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    http_url, grpc_url = soak.server.address("http"), soak.server.address("grpc")
    local = threading.local()

    def http() -> httpclient.InferenceServerClient:
        if not hasattr(local, "http"):
            local.http = httpclient.InferenceServerClient(http_url, network_timeout=60)
        return local.http

    def grpc() -> grpcclient.InferenceServerClient:
        if not hasattr(local, "grpc"):
            local.grpc = grpcclient.InferenceServerClient(grpc_url)
        return local.grpc

    def tensors(module, names_values):  # type: ignore[no-untyped-def]
        inputs = []
        for name, value in names_values:
            tensor = module.InferInput(
                name,
                list(value.shape),
                {np.float32: "FP32", np.int32: "INT32"}.get(value.dtype.type, "UINT8"),
            )
            tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        return inputs

    def add_sub() -> None:
        a, b = np.random.rand(4).astype(np.float32), np.random.rand(4).astype(np.float32)
        result = http().infer("add_sub", tensors(httpclient, [("INPUT0", a), ("INPUT1", b)]))
        assert np.allclose(result.as_numpy("OUTPUT0"), a + b), "add_sub: wrong sum"

    def soak_pid() -> None:
        a = np.random.rand(4).astype(np.float32)
        result = http().infer("soak_pid", tensors(httpclient, [("INPUT0", a)]))
        assert np.array_equal(result.as_numpy("OUTPUT0"), a), "soak_pid: wrong echo"
        soak.pids.add(int(result.as_numpy("PID")[0]))

    def simple() -> None:
        a = np.random.randint(0, 100, (1, 16), dtype=np.int32)
        b = np.random.randint(0, 100, (1, 16), dtype=np.int32)
        result = grpc().infer("simple", tensors(grpcclient, [("INPUT0", a), ("INPUT1", b)]))
        assert np.array_equal(result.as_numpy("OUTPUT0"), a + b), "simple: wrong sum"

    sequence_ids = iter(range(1, 2**62))

    def sequence() -> None:
        sequence_id, total = next(sequence_ids), 0
        for i in range(5):
            value = np.array([[i + 1]], dtype=np.int32)
            total += i + 1
            result = grpc().infer(
                "simple_sequence",
                tensors(grpcclient, [("INPUT", value)]),
                sequence_id=sequence_id,
                sequence_start=i == 0,
                sequence_end=i == 4,
            )
            assert int(result.as_numpy("OUTPUT").flat[0]) == total, "simple_sequence: wrong running sum"

    def ensemble() -> None:
        image = np.random.randint(0, 17, (1, 8, 8), dtype=np.uint8)
        result = http().infer("digits_ensemble", tensors(httpclient, [("RAW_IMAGE", image)]))
        assert abs(float(result.as_numpy("probabilities").sum()) - 1.0) < 1e-3, "ensemble: not probabilities"

    def stream() -> None:
        answers: queue.Queue[object] = queue.Queue()
        client = grpcclient.InferenceServerClient(grpc_url)
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        try:
            values = np.arange(4, dtype=np.int32)
            inputs = [
                grpcclient.InferInput("IN", [4], "INT32"),
                grpcclient.InferInput("DELAY", [4], "UINT32"),
            ]
            inputs.append(grpcclient.InferInput("WAIT", [1], "UINT32"))
            inputs[0].set_data_from_numpy(values)
            inputs[1].set_data_from_numpy(np.zeros(4, dtype=np.uint32))
            inputs[2].set_data_from_numpy(np.zeros(1, dtype=np.uint32))
            client.async_stream_infer("repeat_int32", inputs)
            got = []
            for _ in range(4):
                answer = answers.get(timeout=60)
                if isinstance(answer, Exception):
                    raise answer
                got.append(int(answer.as_numpy("OUT")[0]))  # type: ignore[attr-defined]
            assert got == list(values), f"repeat_int32: {got}"
        finally:
            client.stop_stream()
            client.close()

    steps = {
        "add_sub http": add_sub,
        "soak_pid http": soak_pid,
        "simple grpc (reloaded)": simple,
        "simple_sequence grpc": sequence,
        "digits_ensemble http": ensemble,
        "repeat_int32 grpc stream": stream,
    }
    return [soak.run_client(name, step) for name, step in steps.items()]


def _edit_config(repo: Path, turn: int) -> None:
    """A poll-mode change to `simple`: its config with a parameter that changes every time."""
    path = repo / "simple" / "config.pbtxt"
    text = path.read_text().split("\n# soak edit", 1)[0]
    edit = f'\n# soak edit {turn}\nparameters {{ key: "soak_turn" value: {{ string_value: "{turn}" }} }}\n'
    path.write_text(text + edit)


def _kill_instance(soak: Soak) -> int | None:
    """SIGKILL one live process that answered for soak_pid."""
    for pid in sorted(soak.pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            soak.kills.append(time.monotonic())
            soak.pids.discard(pid)
            return pid
    return None


def _footprint(server: Server) -> tuple[float, int, float]:
    """Resident MB and open file descriptors of the server and its child processes, and the
    server's own resident MB (which side grows is the first question when the total does)."""
    root = psutil.Process(server.process.pid)
    rss, fds = 0, 0
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            rss += process.memory_info().rss
            fds += process.num_fds()
    return rss / 2**20, fds, root.memory_info().rss / 2**20


def soak(minutes: float, workdir: Path, kill_every_s: float = 300.0, edit_every_s: float = 60.0) -> dict:
    repo = workdir / "soak-repo"
    _prepare(repo)
    server = start_tcli(
        [repo],
        workdir / "tcli-soak.log",
        extra=["--model-control-mode", "poll", "--repository-poll-secs", "2"],
    )
    try:
        server.wait()
        began = time.monotonic()
        soak_state = Soak(server, repo, began + minutes * 60)
        threads = _clients(soak_state)
        warm = min(60.0, minutes * 60 / 5)
        time.sleep(warm)  # the clients' own start-up (imports, connections) is not a leak
        start = _footprint(server)
        next_edit, next_kill, turn, killed = began + edit_every_s, began + kill_every_s, 0, []
        next_sample, timeline = time.monotonic() + 60.0, [start]
        while time.monotonic() < soak_state.until:
            now = time.monotonic()
            if now >= next_sample:  # a minute-by-minute record: growth that levels off is not a leak
                timeline.append(_footprint(server))
                log("soak footprint: {:.1f} MB total, {} fds, server {:.1f} MB".format(*timeline[-1]))
                next_sample += 60.0
            if now >= next_edit:
                turn += 1
                _edit_config(repo, turn)
                next_edit += edit_every_s
            if now >= next_kill:
                killed.append(_kill_instance(soak_state))
                next_kill += kill_every_s
            if server.process.poll() is not None:
                raise RuntimeError(
                    f"tcli serve exited with {server.process.returncode}; see {server.log_path}"
                )
            time.sleep(0.5)
        for thread in threads:
            thread.join(120)
        end = _footprint(server)
    finally:
        server.stop()
    # each reload of `simple` after the first load is one poll-mode edit taken up
    reloads = server.log_path.read_text(errors="replace").count("successfully loaded 'simple' version") - 1
    tallies = soak_state.tallies
    return {
        "minutes": minutes,
        "sent": sum(t.sent for t in tallies.values()),
        "failed": sum(sum(t.failures.values()) for t in tallies.values()),
        "on_killed": sum(t.on_killed for t in tallies.values()),
        "per_client": {name: (t.sent, sum(t.failures.values()), t.on_killed) for name, t in tallies.items()},
        "failures": {name: dict(t.failures.most_common(3)) for name, t in tallies.items() if t.failures},
        "edits": turn,
        "reloads": reloads,
        "kills": [pid for pid in killed if pid],
        "rss_mb": (round(start[0], 1), round(end[0], 1)),
        "server_rss_mb": (round(start[2], 1), round(end[2], 1)),
        "fds": (start[1], end[1]),
        "timeline_mb": [(round(total, 1), round(own, 1)) for total, _, own in timeline],
    }


def rows(ctx: Context) -> list[Row]:
    minutes = 1.0 if ctx.quick else 5.0
    log(
        f"soak: {minutes:g} minutes of mixed load, a config edit each minute, an instance killed each 2.5 minutes"
    )
    result = soak(minutes, ctx.workdir, kill_every_s=minutes * 30)
    return _rows(result)


def _rows(result: dict) -> list[Row]:
    minutes, (rss0, rss1), (fd0, fd1) = result["minutes"], result["rss_mb"], result["fds"]
    clients = ", ".join(f"{name} {sent:,}" for name, (sent, _, _) in result["per_client"].items())
    failures = "; ".join(f"{name}: {f}" for name, f in result["failures"].items()) or "none"
    return [
        Row(
            f"8a soak {minutes:g} min: requests failed (not on a killed instance)",
            f"{result['failed']} of {result['sent']:,}",
            f"{result['on_killed']} on {len(result['kills'])} killed instance(s)",
            None,
            "0 failed",
            result["failed"] == 0,
            f"{result['reloads']} of {result['edits']} config edits reloaded by the poller; clients: {clients}; failures: {failures}",
        ),
        Row(
            f"8b soak {minutes:g} min: RSS and open fds, after warm-up -> end",
            f"{rss0:.0f} -> {rss1:.0f} MB, {fd0} -> {fd1} fds",
            "—",
            round(rss1 / rss0, 2) if rss0 else None,
            "within 10%",
            bool(rss0) and rss1 <= rss0 * 1.10 and fd1 <= fd0 * 1.10 + 2,
            "server and its instance processes (the server alone: {:.0f} -> {:.0f} MB)".format(
                *result["server_rss_mb"]
            ),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--kill-every", type=float, default=300.0, help="seconds between instance kills")
    args = parser.parse_args()
    from benchmarks.table import machine, render

    with tempfile.TemporaryDirectory(prefix="tcli-soak-") as tmp:
        result = soak(args.minutes, Path(tmp), kill_every_s=args.kill_every)
    render(_rows(result), f"tcli soak ({args.minutes:g} min), {machine()}")
    print(result)


if __name__ == "__main__":
    main()
