"""Two `tcli serve` replicas behind a real HAProxy on loopback (issue 13), under steady add_sub load from
a few tritonclient threads through the proxy, every answer checked:

- kill -9 of a replica fails at most the requests in flight on it, HAProxy marks it DOWN within its
  health-check interval, and every request sent after that succeeds;
- a rolling restart (SIGTERM, wait for the exit, start again on the same port) loses nothing: the
  replica answers not ready at once but goes on serving until HAProxy has routed around it;
- the restarted replica rejoins: HAProxy marks it UP and its own inference_count grows again.

HAProxy's choices (`haproxy_config`): `option httpchk GET /v2/health/ready` every 250 ms, DOWN after
2 failed checks and UP after 2 good ones, so routing changes within ~0.5 s. `retry-on conn-failure
empty-response response-timeout` with `option redispatch 1` resends a request whose connection failed
or that got no answer to the other replica: right for stateless inference, which is idempotent (a
retried add_sub computes the same sums), and exactly the requests a kill -9 cuts. Not right for
sequence models (their state lives in one replica) nor for 503s: retrying 503 would hide a replica
turning requests away while it still reports ready, which is what the rolling restart checks.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.integration.conftest import REPO, python_host_available
from tests.reference import free_port

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
TCLI = Path(sys.executable).parent / "tcli"
CLIENTS = 3  # client threads, each with one request in flight at a time
CHECK_INTER_MS = 250
FALL = RISE = 2

pytestmark = [
    pytest.mark.skipif(
        not os.access(HAPROXY, os.X_OK), reason="haproxy is not installed (apt-get install haproxy)"
    ),
    pytest.mark.skipif(not python_host_available(), reason="add_sub needs the python backend host"),
]


def _get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """Status and body of a GET; 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as error:
        return int(error.code), b""
    except OSError:
        return 0, b""


def _wait(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> float:
    """Poll `condition()` until true; seconds it took. Fails the test after `timeout`."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if condition():
            return time.monotonic() - began
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class Replica:
    """`tcli serve` serving add_sub on a fixed HTTP port, so that it can restart where HAProxy expects it."""

    def __init__(self, name: str, port: int, log_dir: Path) -> None:
        self.name, self.port, self.log_path = name, port, log_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        command = [str(TCLI), "serve", "--model-repository", str(REPO), "--model-control-mode", "explicit"]
        command += ["--load-model", "add_sub", "--http-address", "127.0.0.1", "--http-port", str(self.port)]
        command += ["--allow-grpc=false", "--allow-metrics=false", "--exit-timeout-secs", "10"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        _wait(self.ready, f"{self.name} ready (log: {self.log_path})")

    def ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(
                f"{self.name} exited with {self.process.returncode}: {self.log_path.read_text()}"
            )
        return _get(f"http://127.0.0.1:{self.port}/v2/health/ready")[0] == 200

    def inference_count(self) -> int:
        import json

        status, body = _get(f"http://127.0.0.1:{self.port}/v2/models/add_sub/stats")
        assert status == 200, f"{self.name} stats answered {status}"
        return int(json.loads(body)["model_stats"][0]["inference_count"])

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, number: int) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, number)  # its python instance processes too, as kill -9 of a pod would

    def stop(self) -> int | None:
        if self.process is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            return self.process.wait(10)


def haproxy_config(port: int, stats_port: int, replicas: list[Replica]) -> str:
    servers = "\n".join(f"    server {r.name} 127.0.0.1:{r.port} check" for r in replicas)
    return f"""
global
    maxconn 256

defaults
    mode http
    timeout connect 1s
    timeout client 10s
    timeout server 10s
    retries 2
    option redispatch 1
    retry-on conn-failure empty-response response-timeout

frontend inference
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /v2/health/ready
    http-check expect status 200
    default-server inter {CHECK_INTER_MS}ms fastinter {CHECK_INTER_MS}ms downinter {CHECK_INTER_MS}ms fall {FALL} rise {RISE}
{servers}

frontend stats
    bind 127.0.0.1:{stats_port}
    stats enable
    stats uri /stats
"""


@dataclass
class Cluster:
    replicas: list[Replica]
    port: int
    stats_port: int

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def status(self, name: str) -> str:
        """HAProxy's view of a replica: UP, DOWN, 'UP 1/2' while rising, ..."""
        status, body = _get(f"http://127.0.0.1:{self.stats_port}/stats;csv")
        assert status == 200, f"HAProxy stats answered {status}"
        rows = csv.DictReader(io.StringIO(body.decode().lstrip("# ")))
        return next(row["status"] for row in rows if row["pxname"] == "replicas" and row["svname"] == name)

    def ensure_up(self) -> None:
        """Every replica running and UP in HAProxy (a test before may have killed or restarted one)."""
        for replica in self.replicas:
            if not replica.alive():
                replica.start()
        for replica in self.replicas:
            _wait(lambda r=replica: self.status(r.name) == "UP", f"HAProxy to mark {replica.name} UP")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("lb")
    replicas = [Replica(name, free_port(), workdir) for name in ("r1", "r2")]
    haproxy: subprocess.Popen[bytes] | None = None
    try:
        for replica in replicas:
            replica.start()
        port, stats_port = free_port(), free_port()
        config = workdir / "haproxy.cfg"
        config.write_text(haproxy_config(port, stats_port, replicas))
        log = (workdir / "haproxy.log").open("wb")
        haproxy = subprocess.Popen([HAPROXY, "-f", str(config), "-db"], stdout=log, stderr=subprocess.STDOUT)
        running = Cluster(replicas, port, stats_port)
        _wait(
            lambda: haproxy.poll() is not None or _get(f"http://{running.url}/v2/health/live")[0] == 200,
            "HAProxy",
        )
        assert haproxy.poll() is None, (workdir / "haproxy.log").read_text()
        running.ensure_up()
        yield running
    finally:
        if haproxy is not None:
            haproxy.terminate()
            haproxy.wait(10)
        for replica in replicas:
            replica.stop()


@dataclass
class Outcome:
    began: float  # time.monotonic()
    ended: float
    error: str | None  # None: answered and the sums were right


@dataclass
class Load:
    """CLIENTS threads sending add_sub through HAProxy back to back until stopped (or 120 s / 100,000
    requests each, whichever first), recording each request's outcome."""

    url: str
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        for number in range(CLIENTS):
            thread = threading.Thread(target=self._client, args=(number,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _client(self, number: int) -> None:
        client = httpclient.InferenceServerClient(self.url, network_timeout=10)
        inputs = [httpclient.InferInput("INPUT0", [4], "FP32"), httpclient.InferInput("INPUT1", [4], "FP32")]
        deadline = time.monotonic() + 120
        for i in range(100_000):
            if self._stop.is_set() or time.monotonic() > deadline:
                break
            a = np.full(4, i, np.float32)
            b = np.full(4, number, np.float32)
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            began = time.monotonic()
            try:
                result = client.infer("add_sub", inputs)
                good = (result.as_numpy("OUTPUT0") == a + b).all() and (
                    result.as_numpy("OUTPUT1") == a - b
                ).all()
                error = None if good else "wrong sums"
            except Exception as exc:  # the failure is what the test counts
                error = f"{type(exc).__name__}: {exc}"
                client.close()  # a fresh connection, as a client library's retry would open
                client = httpclient.InferenceServerClient(self.url, network_timeout=10)
            self.outcomes.append(Outcome(began, time.monotonic(), error))
        client.close()

    def count(self) -> int:
        return len(self.outcomes)

    def wait_for(self, more: int) -> None:
        """Until `more` further requests have been answered."""
        target = self.count() + more
        _wait(lambda: self.count() >= target, f"{more} more requests")

    def failures(self, since: float = 0.0) -> list[Outcome]:
        return [o for o in list(self.outcomes) if o.error is not None and o.ended >= since]


def test_kill_9_fails_only_requests_in_flight_and_haproxy_routes_around(cluster: Cluster) -> None:
    cluster.ensure_up()
    victim = cluster.replicas[0]
    with Load(cluster.url) as load:
        load.wait_for(200)
        killed = time.monotonic()
        victim.signal(signal.SIGKILL)
        down = _wait(
            lambda: cluster.status(victim.name).startswith("DOWN"), "HAProxy to mark the killed replica DOWN"
        )
        load.wait_for(300)
    failed = load.failures(since=killed)
    after_down = [o for o in load.outcomes if o.began > killed + down]
    last_failure = max((o.ended - killed for o in failed), default=0.0)
    print(
        f"\nkill -9: {len(failed)} failed of {load.count()} ({CLIENTS} clients); HAProxy marked it DOWN "
        f"after {down:.2f} s; last failure {last_failure:.2f} s after the kill; "
        f"{len(after_down)} requests sent after DOWN"
    )
    assert len(failed) <= CLIENTS, [o.error for o in failed]
    assert down < (FALL + 2) * CHECK_INTER_MS / 1000, f"HAProxy took {down:.2f} s to route around the kill"
    assert after_down and all(o.error is None for o in after_down)
    assert not load.failures()[: -len(failed) or None], "requests failed before the kill"


def test_rolling_restart_loses_nothing_and_replicas_rejoin(cluster: Cluster) -> None:
    cluster.ensure_up()
    with Load(cluster.url) as load:
        load.wait_for(200)
        for replica in cluster.replicas:
            replica.signal(signal.SIGTERM)
            gone = _wait(lambda r=replica: not r.alive(), f"{replica.name} to exit after SIGTERM")
            assert replica.process is not None and replica.process.returncode == 0, (
                replica.log_path.read_text()
            )
            replica.start()
            _wait(
                lambda r=replica: cluster.status(r.name) == "UP", f"HAProxy to mark {replica.name} UP again"
            )
            before = replica.inference_count()  # requests it has served since it restarted
            load.wait_for(100)
            after = replica.inference_count()
            print(
                f"\n{replica.name}: exited {gone:.2f} s after SIGTERM, served {after - before} of the next 100"
            )
            assert after > before, f"{replica.name} is UP again but serves nothing"
    failed = load.failures()
    print(f"rolling restart: {len(failed)} failed of {load.count()} requests")
    assert not failed, [o.error for o in failed[:5]]
