"""Where a python instance process's time goes (issue 20): CPU per request of the server process and
of the instance process, and wall time, for add_sub in its own process (tcli's default) and opted
in to the server process, while one client sends requests one after another over HTTP.

    .venv/bin/python benchmarks/process_hop_cost.py [--requests 3000]

CPU is read with psutil before and after each pass (user + system time of the server, and of its
child processes); the two models are measured twice, alternately, after a warm-up each.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil
import tritonclient.http as httpclient

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import start_tcli
from benchmarks.observe import cpu_seconds
from benchmarks.repos import IN_SERVER, copy_examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    count = parser.parse_args().requests
    with tempfile.TemporaryDirectory(prefix="tcli-hop-") as tmp:
        repo = Path(tmp) / "repo"
        copy_examples(repo, ("add_sub",))  # with add_sub_in_server beside it
        server = start_tcli([repo], Path(tmp) / "tcli.log")
        try:
            server.wait()
            client = httpclient.InferenceServerClient(server.address("http"))
            inputs = [httpclient.InferInput(name, [4], "FP32") for name in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(np.ones(4, np.float32))
            root = psutil.Process(server.process.pid)
            for model in ("add_sub", IN_SERVER, "add_sub", IN_SERVER):
                for _ in range(300):  # warm-up: instance started, first executions done
                    client.infer(model, inputs)
                children = root.children(recursive=True)
                server0, children0 = cpu_seconds(root), sum(cpu_seconds(c) for c in children)
                began = time.perf_counter()
                for _ in range(count):
                    client.infer(model, inputs)
                wall = time.perf_counter() - began
                server1, children1 = cpu_seconds(root), sum(cpu_seconds(c) for c in children)
                print(
                    f"{model:18s} wall {wall / count * 1e6:5.0f} µs/request   server CPU "
                    f"{(server1 - server0) / count * 1e6:4.0f} µs   instance process CPU "
                    f"{(children1 - children0) / count * 1e6:4.0f} µs"
                )
        finally:
            server.stop()


if __name__ == "__main__":
    main()
