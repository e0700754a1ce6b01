"""HTTP connection limits of `tcli serve` (--http-header-timeout, --http-body-timeout,
--http-keepalive-timeout, --http-max-connections, --http-max-input-size), over raw sockets on
127.0.0.1 against a server process of its own: what a client, a load balancer or an operator watching
the server's file descriptors would notice."""

from __future__ import annotations

import gzip
import json
import selectors
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import tritonclient.http as httpclient

from tests.integration.serve_process import ServeProcess
from tests.repo_builder import add_python_add_sub
from tests.waiting import wait_until

TIMEOUT = 1.0  # the header and body timeouts the server is started with
SLACK = 10.0  # on two shared cores, a sweep and 500 closes may lag behind the timeout this much
STALLED = 500
CAP = 8


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    repository = tmp_path_factory.mktemp("repo")
    add_python_add_sub(repository)
    server = ServeProcess(
        str(repository),
        f"--http-header-timeout={TIMEOUT}",
        f"--http-body-timeout={TIMEOUT}",
        "--http-keepalive-timeout=2",
        f"--http-max-connections={STALLED + CAP}",
        "--http-max-input-size=4096",
    )
    try:
        yield server
    finally:
        server.stop()


def connect(server: ServeProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=30)
    return sock


def server_fds(server: ServeProcess) -> int:
    return psutil.Process(server.process.pid).num_fds()


def read_all(sock: socket.socket, timeout: float = 30.0) -> bytes:
    """Everything the server sends until it closes the connection."""
    sock.settimeout(timeout)
    data = b""
    for _ in range(1000):
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def add_sub_body() -> bytes:
    inputs = [
        {"name": name, "datatype": "FP32", "shape": [1, 4], "data": [1.0, 2.0, 3.0, 4.0]}
        for name in ("INPUT0", "INPUT1")
    ]
    return json.dumps({"inputs": inputs}).encode()


def assert_serves(server: ServeProcess) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        assert client.is_server_ready()
        assert client.is_model_ready("add_sub")
    finally:
        client.close()


def test_stalled_heads_and_bodies_are_answered_408_closed_and_freed(served: ServeProcess) -> None:
    assert_serves(served)
    baseline = server_fds(served)
    heads = b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: tcli\r\nContent-Le"
    bodies = b'POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: tcli\r\nContent-Length: 1000\r\n\r\n{"in'
    sockets = []
    try:
        for index in range(STALLED):
            sock = connect(served)
            sock.sendall(heads if index % 2 else bodies)
            sockets.append(sock)
        began = time.monotonic()
        selector = selectors.DefaultSelector()
        for sock in sockets:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, bytearray())
        open_ = set(sockets)
        answers: dict[socket.socket, bytes] = {}
        deadline = began + TIMEOUT + SLACK
        while open_ and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if chunk:
                    key.data.extend(chunk)
                    continue
                selector.unregister(sock)
                open_.discard(sock)
                answers[sock] = bytes(key.data)
        selector.close()
        assert not open_, f"{len(open_)} stalled connections still open {TIMEOUT + SLACK}s after the timeout"
        for index, sock in enumerate(sockets):
            answer = answers[sock]
            assert answer.startswith(b"HTTP/1.1 408 "), answer
            what = b"request head" if index % 2 else b"request body"
            assert what in answer, answer
    finally:
        for sock in sockets:
            sock.close()
    # everything the stalled clients held is gone: the server's descriptors are back where they were
    wait_until(lambda: server_fds(served) <= baseline + 5, "the server's descriptors to be freed")
    assert_serves(served)


def test_a_connection_that_sends_nothing_is_closed_silently(served: ServeProcess) -> None:
    with connect(served) as sock:
        began = time.monotonic()
        assert read_all(sock) == b""
        assert time.monotonic() - began < TIMEOUT + SLACK


def test_a_slow_body_that_keeps_coming_is_served(served: ServeProcess) -> None:
    """The body timeout is a wait without any byte, not a deadline for the whole upload."""
    body = add_sub_body()
    head = b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: tcli\r\nContent-Length: %d\r\n\r\n" % len(body)
    with connect(served) as sock:
        sock.sendall(head)
        pieces = [body[i : i + len(body) // 4 + 1] for i in range(0, len(body), len(body) // 4 + 1)]
        for piece in pieces:
            time.sleep(TIMEOUT / 2)  # a client pacing its upload: the pauses are the point
            sock.sendall(piece)
        sock.settimeout(30)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200 "), answer


def test_idle_keep_alive_connection_closes_after_the_keepalive_timeout(served: ServeProcess) -> None:
    with connect(served) as sock:
        sock.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: tcli\r\n\r\n")
        sock.settimeout(30)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        began = time.monotonic()
        assert read_all(sock) == b""  # closed, nothing more sent
        waited = time.monotonic() - began
    assert 2 - 0.5 <= waited < 2 + SLACK, waited


def test_connections_beyond_the_cap_are_answered_503(tmp_path: Path) -> None:
    """Beyond --http-max-connections a connection gets an immediate 503 (a load balancer retries it
    elsewhere) and a close; once a served connection goes, new ones are served again."""
    add_python_add_sub(tmp_path)
    server = ServeProcess(str(tmp_path), f"--http-max-connections={CAP}")
    held: list[socket.socket] = []
    try:
        for _ in range(CAP):
            sock = connect(server)
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: tcli\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            held.append(sock)
        with connect(server) as extra:
            extra.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: tcli\r\n\r\n")
            answer = read_all(extra)
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        assert b"connection: close" in answer.lower()
        assert b"--http-max-connections" in answer
        for sock in held:  # the connections within the cap are still served
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: tcli\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
        held.pop().close()
        answers = []
        for _ in range(100):  # until the server has seen the close: a new connection is served
            with connect(server) as again:
                again.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: tcli\r\n\r\n")
                answers.append(again.recv(65536)[:12])
            if answers[-1] == b"HTTP/1.1 200":
                break
            time.sleep(0.02)  # polling interval
        assert answers[-1] == b"HTTP/1.1 200", answers
    finally:
        for sock in held:
            sock.close()
        server.stop()


def test_a_content_length_over_the_limit_is_refused_before_the_body(served: ServeProcess) -> None:
    """400 with Triton's text (--http-max-input-size, Triton 2.52+), answered from the head alone,
    and the connection closes: the 10 MB the head announces are never sent, never waited for."""
    with connect(served) as sock:
        sock.sendall(
            b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: tcli\r\nContent-Length: 10000000\r\n\r\n"
        )
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert (
        b"request JSON size of 10000000 bytes exceeds the maximum allowed input size of 4096 bytes. "
        b"Use --http-max-input-size to increase the limit." in answer
    )
    assert b"connection: close" in answer.lower()


def test_a_chunked_body_is_stopped_when_it_passes_the_limit(served: ServeProcess) -> None:
    """Chunks go on arriving (an endless upload); the server answers once 4096 bytes have passed and
    closes, reading no more than it must."""
    with connect(served) as sock:
        sock.sendall(
            b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: tcli\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"%x\r\n%s\r\n" % (1000, b" " * 1000)
        answer = b""
        sock.settimeout(0.05)
        for _ in range(200):  # 200 KB at most, far beyond the limit
            try:
                sock.sendall(chunk)
            except OSError:
                break
            try:
                answer += sock.recv(65536)
            except TimeoutError:
                continue
            if answer:
                break
        answer += read_all(sock)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b"exceeds the maximum allowed input size of 4096 bytes" in answer


def test_a_gzip_body_never_inflates_beyond_the_limit(served: ServeProcess) -> None:
    packed = gzip.compress(b" " * 1_000_000)  # ~1 KB on the wire, 1 MB inflated
    assert len(packed) < 4096
    head = (
        b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: tcli\r\nContent-Encoding: gzip\r\n"
        b"Content-Length: %d\r\n\r\n" % len(packed)
    )
    with connect(served) as sock:
        sock.sendall(head + packed)
        sock.settimeout(30)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b"exceeds the maximum allowed input size of 4096 bytes" in answer
