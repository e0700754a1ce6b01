"""Two `tcli serve` replicas behind a real HAProxy on loopback (issue 13), under steady add_sub load from
a few tritonclient threads through the proxy, every answer checked:

- kill -9 of a replica fails at most the requests in flight on it, HAProxy marks it DOWN within its
  health-check interval, and every request sent after that succeeds;
- a rolling restart (SIGTERM, wait for the exit, start again on the same port) loses nothing, through
  a proxy that never retries: the replica answers not ready at once but serves on until HAProxy has
  routed around it (server/app.py Server.unready);
- the restarted replica rejoins: HAProxy marks it UP and its own inference_count grows again.

HAProxy's choices (`haproxy_config`): `option httpchk GET /v2/health/ready` every 250 ms, DOWN after
2 failed checks and UP after 2 good ones, so routing changes within ~0.5 s. Two frontends share the
replicas. `retrying` resends a request whose connection failed or that got no answer to the other
replica (`retry-on conn-failure empty-response response-timeout`, `option redispatch 1`): right for
stateless inference, which is idempotent (a retried add_sub computes the same sums), and exactly the
requests a kill -9 cuts; not right for sequence models, whose state lives in one replica. It does not
retry 503s, which would hide a replica turning requests away while it still reports ready. `strict`
retries nothing (`retries 0`), like a plain Kubernetes Service: the rolling restart goes through it,
so that only the server's own shutdown order can make it lossless. `timeout connect 100ms` (loopback)
also bounds HAProxy's pause before a retry, min(timeout connect, 1 s).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
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
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from server.app import QUIET_SECS
from tests.integration.conftest import REPO
from tests.reference import free_port

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
TCLI = Path(sys.executable).parent / "tcli"
CLIENTS = 3  # client threads, each with one request in flight at a time
CHECK_INTER_MS = 250
FALL = RISE = 2

needs_haproxy = pytest.mark.skipif(
    not os.access(HAPROXY, os.X_OK), reason="haproxy is not installed (apt-get install haproxy)"
)


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
    """`tcli serve` serving add_sub on a fixed HTTP port, so that it restarts where HAProxy expects it."""

    def __init__(self, name: str, port: int, log_dir: Path) -> None:
        self.name, self.port, self.log_path = name, port, log_dir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [str(TCLI), "serve", "--model-repository", str(REPO), "--model-control-mode", "explicit"]
        command += ["--load-model", "add_sub", "--http-address", "127.0.0.1", "--http-port", str(self.port)]
        command += ["--allow-grpc=false", "--allow-metrics=false", "--exit-timeout-secs", "10"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        _wait(lambda: self.ready_status() == 200, f"{self.name} ready (log: {self.log_path})")

    def ready_status(self) -> int:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(
                f"{self.name} exited with {self.process.returncode}: {self.log_path.read_text()}"
            )
        return _get(f"http://{self.url}/v2/health/ready")[0]

    def inference_count(self) -> int:
        status, body = _get(f"http://{self.url}/v2/models/add_sub/stats")
        assert status == 200, f"{self.name} stats answered {status}"
        return int(json.loads(body)["model_stats"][0]["inference_count"])

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exited(self) -> bool:
        return not self.alive()

    def signal(self, number: int) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, number)  # its python instance processes too, as a pod's kill would

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


BACKENDS = {
    "retrying": "retries 2\n    option redispatch 1\n    retry-on conn-failure empty-response response-timeout"
}
BACKENDS["strict"] = "retries 0"


def haproxy_config(ports: dict[str, int], stats_port: int, replicas: list[Replica]) -> str:
    servers = "\n".join(f"    server {r.name} {r.url} check" for r in replicas)
    checks = f"inter {CHECK_INTER_MS}ms fastinter {CHECK_INTER_MS}ms downinter {CHECK_INTER_MS}ms fall {FALL} rise {RISE}"
    sections = [
        "global\n    maxconn 256",
        "defaults\n    mode http\n    timeout connect 100ms\n    timeout client 10s\n    timeout server 10s",
        f"frontend stats\n    bind 127.0.0.1:{stats_port}\n    stats enable\n    stats uri /stats",
    ]
    for name, retries in BACKENDS.items():
        sections.append(f"frontend {name}\n    bind 127.0.0.1:{ports[name]}\n    default_backend {name}")
        sections.append(
            f"backend {name}\n    balance roundrobin\n    {retries}\n    option httpchk GET /v2/health/ready\n"
            f"    http-check expect status 200\n    default-server {checks}\n{servers}"
        )
    return "\n\n".join(sections) + "\n"


@dataclass
class Cluster:
    replicas: list[Replica]
    ports: dict[str, int]  # frontend name -> port
    stats_port: int

    def url(self, frontend: str) -> str:
        return f"127.0.0.1:{self.ports[frontend]}"

    def statuses(self, name: str) -> set[str]:
        """HAProxy's view of a replica in each backend: UP, DOWN, 'UP 1/2' while falling, ..."""
        status, body = _get(f"http://127.0.0.1:{self.stats_port}/stats;csv")
        assert status == 200, f"HAProxy stats answered {status}"
        rows = csv.DictReader(io.StringIO(body.decode().lstrip("# ")))
        return {row["status"] for row in rows if row["pxname"] in BACKENDS and row["svname"] == name}

    def is_up(self, name: str) -> bool:
        return self.statuses(name) == {"UP"}

    def ensure_up(self) -> None:
        """Every replica running and UP in HAProxy (a test before may have killed or restarted one)."""
        for replica in self.replicas:
            if not replica.alive():
                replica.start()
        for replica in self.replicas:
            _wait(partial(self.is_up, replica.name), f"HAProxy to mark {replica.name} UP")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("lb")
    replicas = [Replica(name, free_port(), workdir) for name in ("r1", "r2")]
    haproxy: subprocess.Popen[bytes] | None = None
    try:
        for replica in replicas:
            replica.start()
        running = Cluster(replicas, {name: free_port() for name in BACKENDS}, free_port())
        config = workdir / "haproxy.cfg"
        config.write_text(haproxy_config(running.ports, running.stats_port, replicas))
        with (workdir / "haproxy.log").open("wb") as log:
            haproxy = subprocess.Popen(
                [HAPROXY, "-f", str(config), "-db"], stdout=log, stderr=subprocess.STDOUT
            )
        stats = f"http://127.0.0.1:{running.stats_port}/stats"
        _wait(lambda: haproxy.poll() is not None or _get(stats)[0] == 200, "HAProxy's stats page")
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
    error: str | None  # None: answered, and the sums were right


@dataclass
class Load:
    """CLIENTS threads sending add_sub to `url` back to back until stopped (or 120 s / 100,000 requests
    each, whichever first), recording every request's outcome."""

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
            a, b = np.full(4, i, np.float32), np.full(4, number, np.float32)
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(b)
            began = time.monotonic()
            try:
                result = client.infer("add_sub", inputs)
                right = (result.as_numpy("OUTPUT0") == a + b).all() and (
                    result.as_numpy("OUTPUT1") == a - b
                ).all()
                error = None if right else "wrong sums"
            except Exception as exc:  # a failure is what the test counts
                error = f"{type(exc).__name__}: {exc}"
                client.close()  # a fresh connection, as a client's own retry would open
                client = httpclient.InferenceServerClient(self.url, network_timeout=10)
            self.outcomes.append(Outcome(began, time.monotonic(), error))
        client.close()

    def wait_for(self, more: int) -> None:
        """Until `more` further requests have been answered."""
        target = len(self.outcomes) + more
        _wait(lambda: len(self.outcomes) >= target, f"{more} more requests")

    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error is not None]


def test_sigterm_answers_not_ready_at_once_and_serves_until_requests_stop(tmp_path: Path) -> None:
    replica = Replica("solo", free_port(), tmp_path)
    replica.start()
    try:
        with Load(replica.url) as load:
            load.wait_for(50)
            replica.signal(signal.SIGTERM)
            _wait(lambda: replica.ready_status() != 200, "readiness to go false after SIGTERM", timeout=5)
            served = time.monotonic()
            load.wait_for(50)  # still served while unready, for as long as requests keep coming
            _wait(lambda: time.monotonic() - served > 2 * QUIET_SECS, "two quiet periods")
            assert replica.alive(), "stopped while requests were still coming"
        stopped = time.monotonic()
        _wait(replica.exited, "the exit once requests stopped", timeout=QUIET_SECS + 10)
        print(f"\nexited {time.monotonic() - stopped:.2f} s after the last request")
        assert replica.process is not None and replica.process.returncode == 0
        assert not load.failures(), [o.error for o in load.failures()[:5]]
    finally:
        replica.stop()


@needs_haproxy
def test_kill_9_fails_only_requests_in_flight_and_haproxy_routes_around(cluster: Cluster) -> None:
    cluster.ensure_up()
    victim = cluster.replicas[0]
    with Load(cluster.url("retrying")) as load:
        load.wait_for(200)
        killed = time.monotonic()
        victim.signal(signal.SIGKILL)
        down = _wait(
            lambda: cluster.statuses(victim.name) == {"DOWN"}, "HAProxy to mark the killed replica DOWN"
        )
        load.wait_for(300)
    before = [o for o in load.outcomes if o.ended < killed]
    around = [o for o in load.outcomes if o.ended >= killed and o.began <= killed + down]
    after = [o for o in load.outcomes if o.began > killed + down]
    failed = [o for o in around if o.error is not None]
    slowest = max(o.ended - o.began for o in around)
    print(
        f"\nkill -9: {len(failed)} of {len(around)} requests failed between the kill and DOWN "
        f"({CLIENTS} clients); HAProxy marked it DOWN {down:.2f} s after the kill; slowest request "
        f"meanwhile {slowest * 1000:.0f} ms; {len(after)} requests after DOWN, all answered"
    )
    assert not [o for o in before if o.error], "requests failed before the kill"
    assert len(failed) <= CLIENTS, [o.error for o in failed]
    assert down < (FALL + 2) * CHECK_INTER_MS / 1000, f"HAProxy took {down:.2f} s to route around the kill"
    assert after and not [o.error for o in after if o.error]


@needs_haproxy
def test_rolling_restart_loses_nothing_and_replicas_rejoin(cluster: Cluster) -> None:
    cluster.ensure_up()
    with Load(cluster.url("strict")) as load:
        load.wait_for(200)
        for replica in cluster.replicas:
            replica.signal(signal.SIGTERM)
            gone = _wait(replica.exited, f"{replica.name} to exit after SIGTERM")
            assert replica.process is not None and replica.process.returncode == 0, (
                replica.log_path.read_text()
            )
            replica.start()
            _wait(
                partial(cluster.is_up, replica.name),
                f"HAProxy to mark {replica.name} UP again",
            )
            before = replica.inference_count()  # what it has served since it started again
            load.wait_for(100)
            served = replica.inference_count() - before
            print(
                f"\n{replica.name}: exited {gone:.2f} s after SIGTERM; back UP, served {served} of the next 100"
            )
            assert served > 0, f"{replica.name} is UP again but serves nothing"
    failed = load.failures()
    print(f"rolling restart through a proxy without retries: {len(failed)} failed of {len(load.outcomes)}")
    assert not failed, [o.error for o in failed[:5]]
